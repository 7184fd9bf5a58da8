package conformance

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/autoscale"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/karpenter"
)

// nodeWatch follows the autoscaled nodes, and Karpenter's NodeClaims,
// from a scenario's start: what was added, when first seen (bounded by
// the server's creation time, as the recorder's milestones), when Ready,
// and what went.
type nodeWatch struct {
	selector map[string]string
	before   map[string]bool
	// added are nodes (or NodeClaims, "nodeclaim/<name>" until they name
	// their node) that were not there at the start, by first sight.
	added     []string
	start     time.Time
	firstSeen time.Time
	ready     map[string]time.Time
	present   map[string]bool
	claimNode map[string]string
}

func newNodeWatch(v ascView) *nodeWatch {
	return &nodeWatch{selector: v.selector(), before: v.existing, start: time.Now(), ready: map[string]time.Time{}, present: map[string]bool{}, claimNode: map[string]string{}}
}

func proven(now time.Time, created metav1.Time) time.Time {
	if bound := created.Add(time.Second); !created.IsZero() && bound.Before(now) {
		return bound
	}
	return now
}

// observe lists the nodes and NodeClaims once.
func (w *nodeWatch) observe(ctx context.Context) error {
	now := time.Now()
	var nodes corev1.NodeList
	if err := cluster.Client.List(ctx, &nodes, client.MatchingLabels(w.selector)); err != nil {
		return err
	}
	w.present = map[string]bool{}
	for _, n := range nodes.Items {
		w.present[n.Name] = true
		if w.before[n.Name] {
			continue
		}
		w.see(n.Name, proven(now, n.CreationTimestamp))
		if _, ok := w.ready[n.Name]; !ok && nodeReady(&n) {
			w.ready[n.Name] = now
		}
	}
	if asc.name != "karpenter" {
		return nil
	}
	var claims unstructured.UnstructuredList
	claims.SetGroupVersionKind(karpenter.NodeClaimKind.GroupVersion().WithKind("NodeClaimList"))
	if err := cluster.Client.List(ctx, &claims, client.MatchingLabels(w.selector)); err != nil {
		return err
	}
	for _, c := range claims.Items {
		node, _, _ := unstructured.NestedString(c.Object, "status", "nodeName")
		if w.before[node] {
			continue
		}
		key := "nodeclaim/" + c.GetName()
		if node != "" {
			w.claimNode[key] = node
		}
		// A claim made before the scenario (in flight at its start) is
		// not its: only claims created since are counted.
		if c.GetCreationTimestamp().Time.Before(w.start.Truncate(time.Second)) {
			continue
		}
		w.see(key, proven(now, c.GetCreationTimestamp()))
	}
	return nil
}

func (w *nodeWatch) see(key string, at time.Time) {
	if slices.Contains(w.added, key) {
		return
	}
	w.added = append(w.added, key)
	if w.firstSeen.IsZero() || at.Before(w.firstSeen) {
		w.firstSeen = at
	}
}

// addedNodes are the nodes added, a NodeClaim counted once with its node.
func (w *nodeWatch) addedNodes() []string {
	var out []string
	for _, key := range w.added {
		if node, ok := w.claimNode[key]; ok {
			key = node
		}
		if !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// readyAt is when at least n added nodes were first seen Ready.
func (w *nodeWatch) readyAt(n int) (time.Time, bool) {
	var times []time.Time
	for _, t := range w.ready {
		times = append(times, t)
	}
	if n <= 0 || len(times) < n {
		return time.Time{}, false
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times[n-1], true
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// clusterFreeGPUs are the GPUs free on every usable node, whatever
// --node-selector says: what gpulab's operator counts a gang against.
func clusterFreeGPUs(ctx context.Context) (int64, error) {
	var nodes corev1.NodeList
	if err := cluster.Client.List(ctx, &nodes); err != nil {
		return 0, err
	}
	var pods corev1.PodList
	if err := cluster.Client.List(ctx, &pods); err != nil {
		return 0, err
	}
	used := map[string]int64{}
	for i := range pods.Items {
		used[pods.Items[i].Spec.NodeName] += footprint.BoundGPUs(&pods.Items[i])
	}
	var free int64
	for i := range nodes.Items {
		if ok, _ := footprint.Usable(&nodes.Items[i]); !ok {
			continue
		}
		alloc := nodes.Items[i].Status.Allocatable[gfd.GPUResource]
		free += max(alloc.Value()-used[nodes.Items[i].Name], 0)
	}
	return free, nil
}

// ascNode says whether node is one of the autoscaled nodes (the
// NodePool's, or --node-selector's for cluster-autoscaler).
func ascNode(ctx context.Context, v ascView, node string) bool {
	var n corev1.Node
	if err := cluster.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		return false
	}
	for k, val := range v.selector() {
		if n.Labels[k] != val {
			return false
		}
	}
	return true
}

// checkStays says how a running gang's members were disturbed: one gone,
// replaced or being deleted; "" when all are as they were.
func (s *scenario) checkStays(ctx context.Context, gang string, uids map[string]string) string {
	pods, err := s.gangPodList(ctx, gang)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: listing %s's pods: %v\n", currentAssessment(), gang, err)
		return ""
	}
	now := map[string]corev1.Pod{}
	for _, p := range pods {
		now[p.Name] = p
	}
	for name, uid := range uids {
		p, ok := now[name]
		switch {
		case !ok:
			return fmt.Sprintf("pod %s of the running gang %s was deleted while consolidation ran", name, gang)
		case string(p.UID) != uid:
			return fmt.Sprintf("pod %s of the running gang %s was replaced (evicted) while consolidation ran", name, gang)
		case p.DeletionTimestamp != nil:
			return fmt.Sprintf("pod %s of the running gang %s is being deleted (evicted) while consolidation runs", name, gang)
		}
	}
	return ""
}

// ascPlan is --dry-run's line for the feature: what it would make the
// cluster add.
func ascPlan() string {
	switch {
	case opts.NoAutoscaler():
		return "skipped: no node autoscaler (--autoscaler=none, or a testbed without --autoscaler=karpenter)"
	case opts.Profile == "cluster" && (!opts.Disruptive || opts.MaxNewNodes < 1):
		return "refused: adding nodes to a cluster needs --disruptive and --max-new-nodes"
	}
	budget := fmt.Sprintf("at most %d", autoscale.MaxScaleUp)
	if opts.Profile == "cluster" {
		budget = fmt.Sprintf("at most %d (--max-new-nodes=%d)", min(autoscale.MaxScaleUp, opts.MaxNewNodes), opts.MaxNewNodes)
	}
	return fmt.Sprintf("%s autoscaler: a gang of the NodePool's free whole nodes + %s new nodes (extra nodes allowed: %d), removed after; "+
		"a gang one node past the NodePool's limit, which must add none; 2 gangs of 1 node, one deleted, whose node must go within consolidateAfter + %s",
		opts.Autoscaler, budget, opts.MaxExtraNodes, autoscale.ScaleDownMargin)
}
