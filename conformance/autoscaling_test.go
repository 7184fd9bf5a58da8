package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/autoscale"
	"github.com/gpulab/gpulab/conformance/bare"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/testbeds/local"
)

// TestAutoscaling is the cluster_autoscaling (KAR-0055) plan: a gang
// larger than the free nodes makes the cluster's node autoscaler add what
// it lacks, no more, and binds whole once the nodes are there; a gang no
// NodePool can fit adds no node (and gpulab's operator says so); an
// emptied node goes within the NodePool's consolidation time, and
// consolidation never evicts a member of a gang still running. Workers
// each take a whole node and are kept to the NodePool's nodes; heads to
// nodes outside it, so a deleted gang leaves its nodes empty.
func TestAutoscaling(t *testing.T) {
	const name = "autoscaling"
	const req = results.RequirementClusterAutoscaling
	f := newPlan(name).
		assess(req, "a gang larger than the free nodes makes the autoscaler add what it lacks, no more, and binds whole", ascScaleUp).
		assess(req, "a gang no NodePool can fit adds no node", ascTooBig).
		assess(req, "an emptied node goes within the consolidation time, and consolidation never evicts a running gang's member", ascScaleDown)
	testenv.Test(t, f.feature())
}

// autoscaler is what the run found of the cluster's node autoscaler.
type autoscalerState struct {
	// name is karpenter, cluster-autoscaler or none.
	name string
	// why is why it is none (the feature's skip reason).
	why string
	// nodePool is the Karpenter NodePool the feature grows.
	nodePool string
}

var asc = autoscalerState{name: "none", why: "the autoscaler was not resolved (setup did not finish)"}

// localAutoscaler is the local testbed's autoscaler: Karpenter when the
// run asks for it, else none (the default run stays fast).
func localAutoscaler() string {
	if opts.Profile == "local" && opts.Autoscaler == local.AutoscalerKarpenter {
		return local.AutoscalerKarpenter
	}
	return ""
}

// resolveAutoscaler settles --autoscaler against the cluster, once set up:
// auto is Karpenter where its NodePools are served and one exists, else
// none. A run left with none asks nothing of cluster_autoscaling.
func resolveAutoscaler(ctx context.Context) {
	asc = findAutoscaler(ctx)
	if asc.name == "none" {
		opts.Autoscaler = "none"
		mu.Lock()
		run.Requested, run.Unavailable = results.Requested(opts.Ask()), results.Unavailable(opts.Ask())
		mu.Unlock()
	}
	switch asc.name {
	case "karpenter":
		fmt.Printf("autoscaler: Karpenter, NodePool %s\n", asc.nodePool)
	case "none":
		fmt.Printf("autoscaler: none (%s)\n", asc.why)
	default:
		fmt.Printf("autoscaler: %s\n", asc.name)
	}
}

func findAutoscaler(ctx context.Context) autoscalerState {
	switch {
	case opts.Autoscaler == "none":
		return autoscalerState{name: "none", why: "--autoscaler=none: the cluster's nodes are all there is"}
	case opts.Autoscaler == "cluster-autoscaler":
		return autoscalerState{name: "cluster-autoscaler"}
	case opts.Profile != "cluster" && opts.Autoscaler == "auto":
		return autoscalerState{name: "none", why: fmt.Sprintf("the %s testbed runs no node autoscaler unless asked: --autoscaler=karpenter starts Karpenter (local)", opts.Profile)}
	}
	var pools unstructured.UnstructuredList
	pools.SetGroupVersionKind(karpenter.NodePoolKind.GroupVersion().WithKind("NodePoolList"))
	if err := cluster.Client.List(ctx, &pools); err != nil {
		why := fmt.Sprintf("Karpenter's NodePools are not served (%v)", err)
		if opts.Autoscaler == "karpenter" {
			why = "--autoscaler=karpenter, but " + why
		}
		return autoscalerState{name: "none", why: why}
	}
	if opts.NodePool != "" {
		for _, p := range pools.Items {
			if p.GetName() == opts.NodePool {
				return autoscalerState{name: "karpenter", nodePool: opts.NodePool}
			}
		}
		return autoscalerState{name: "none", why: fmt.Sprintf("no NodePool %s (--nodepool)", opts.NodePool)}
	}
	if opts.Profile == "local" {
		return autoscalerState{name: "karpenter", nodePool: local.KarpenterNodePool}
	}
	var withGPUs, all []string
	for _, p := range pools.Items {
		all = append(all, p.GetName())
		if _, ok, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", "limits", string(gfd.GPUResource)); ok {
			withGPUs = append(withGPUs, p.GetName())
		}
	}
	switch {
	case len(withGPUs) == 1:
		return autoscalerState{name: "karpenter", nodePool: withGPUs[0]}
	case len(all) == 1:
		return autoscalerState{name: "karpenter", nodePool: all[0]}
	case len(all) == 0:
		return autoscalerState{name: "none", why: "Karpenter's NodePools are served, but there is none"}
	}
	return autoscalerState{name: "none", why: fmt.Sprintf("NodePools %s: name the one to grow with --nodepool", strings.Join(all, ", "))}
}

// ascPrecheck skips where the feature cannot run, saying why.
func ascPrecheck(t *testing.T) {
	t.Helper()
	switch {
	case asc.name == "none":
		skipf(t, "no node autoscaler: %s", asc.why)
	case draMode():
		skipf(t, "the autoscaling feature asks for nvidia.com/gpu; --gpu-allocation=dra gangs are not sized for new nodes yet")
	case cluster.Profile == "cluster" && !opts.Disruptive:
		skipf(t, "it makes the cluster add and remove nodes: --profile=cluster needs --disruptive")
	case cluster.Profile == "cluster" && opts.MaxNewNodes < 1:
		skipf(t, "it makes the cluster add nodes: --profile=cluster needs a --max-new-nodes budget")
	}
	overCapacity(t)
}

// ascBudget is how many nodes a scenario may make the cluster add (-1: no
// budget, a testbed).
func ascBudget() int {
	if cluster.Profile == "cluster" {
		return opts.MaxNewNodes
	}
	return -1
}

// ascView is what a scenario reads of the autoscaled capacity before it
// sizes its gang.
type ascView struct {
	pool autoscale.Pool
	// nodeGPUs is a worker's GPUs: the NodePool's nodes' usual size, else
	// the footprint's.
	nodeGPUs int
	// free are the NodePool's whole free nodes the gang may use.
	free []string
	// existing are every node of the NodePool now.
	existing map[string]bool
}

// selector is the label selector of the autoscaled nodes: the NodePool's
// on Karpenter, --node-selector for cluster-autoscaler.
func (ascView) selector() map[string]string {
	if asc.name == "karpenter" {
		return map[string]string{karpenter.NodePoolLabel: asc.nodePool}
	}
	return opts.NodeSelector
}

// readView reads the pool and the nodes it has now.
func readView(ctx context.Context, t *testing.T) ascView {
	t.Helper()
	v := ascView{existing: map[string]bool{}}
	switch asc.name {
	case "karpenter":
		np := &unstructured.Unstructured{}
		np.SetGroupVersionKind(karpenter.NodePoolKind)
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: asc.nodePool}, np); err != nil {
			fatalf(t, "reading NodePool %s: %v", asc.nodePool, err)
		}
		p, err := autoscale.PoolOf(np)
		if err != nil {
			fatalf(t, "%v", err)
		}
		v.pool = p
	default:
		// cluster-autoscaler's node groups are not visible: no limit
		// known, and its default scale-down-unneeded-time.
		v.pool = autoscale.Pool{NodePool: karpenter.NodePool{Name: "cluster-autoscaler", LimitGPUs: -1, ConsolidateAfter: 10 * time.Minute}}
	}
	rooms, err := nodeRooms(ctx, cluster.Client)
	if err != nil {
		fatalf(t, "reading capacity: %v", err)
	}
	var nodes corev1.NodeList
	if err := cluster.Client.List(ctx, &nodes, client.MatchingLabels(v.selector())); err != nil {
		fatalf(t, "listing the autoscaled nodes: %v", err)
	}
	sizes := map[int]int{}
	for _, n := range nodes.Items {
		v.existing[n.Name] = true
		if g := n.Status.Allocatable[gfd.GPUResource]; g.Value() > 0 {
			sizes[int(g.Value())]++
		}
	}
	for g, n := range sizes {
		if n > sizes[v.nodeGPUs] || n == sizes[v.nodeGPUs] && g > v.nodeGPUs {
			v.nodeGPUs = g
		}
	}
	if v.nodeGPUs == 0 {
		v.nodeGPUs = footprint.RoomOf(fp.pool).NodeGPUs
	}
	for _, r := range rooms {
		if v.existing[r.Name] && r.GPUs == v.nodeGPUs && r.Free == r.GPUs {
			v.free = append(v.free, r.Name)
		}
	}
	return v
}

// ascAffinity keeps workers to the autoscaled nodes and heads off them:
// a deleted gang then leaves its nodes empty for consolidation.
func ascAffinity(worker bool) *corev1.Affinity {
	if asc.name != "karpenter" {
		// cluster-autoscaler: --node-selector (placePod) is the group.
		return nil
	}
	op := corev1.NodeSelectorOpNotIn
	if worker {
		op = corev1.NodeSelectorOpIn
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: karpenter.NodePoolLabel, Operator: op, Values: []string{asc.nodePool}}}}}}}}
}

// ascTemplate is podTemplate, placed for autoscaling: not pinned to the
// footprint's nodes (new ones must qualify) and never to be evicted
// alone, as gpulab's operator marks every member.
func ascTemplate(container string, gpus int32, worker bool) corev1.PodTemplateSpec {
	tmpl := podTemplate(container, gpus)
	tmpl.Spec.Affinity = ascAffinity(worker)
	tmpl.Annotations = map[string]string{gang.DoNotDisruptAnnotation: "true"}
	return tmpl
}

var ascQueueName string

// ascQueue is the queue of the feature's gangs: the run's, unless its
// capability is --max-gpus (a pinned footprint), which the gangs' new
// nodes are outside of: then one of the feature's own, with no capability
// (--max-new-nodes is its budget).
func ascQueue(ctx context.Context, t *testing.T) string {
	t.Helper()
	if nativeGangs() {
		return ""
	}
	if opts.Queue != "" || !fp.pinned {
		return fp.queue
	}
	if ascQueueName != "" {
		return ascQueueName
	}
	q := &schedulingv1beta1.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: "gpulab-conformance-" + opts.RunID + "-autoscaling", Labels: runLabels()},
		Spec:       schedulingv1beta1.QueueSpec{Weight: 1, Reclaimable: new(true)},
	}
	if err := cluster.Client.Create(ctx, q); err != nil && !apierrors.IsAlreadyExists(err) {
		fatalf(t, "creating the autoscaling feature's Volcano queue: %v", err)
	}
	ascQueueName = q.Name
	return q.Name
}

// ascGang creates a gang of workers whole-node workers for the autoscaled
// nodes, and a head off them.
func (s *scenario) ascGang(ctx context.Context, name string, workers, nodeGPUs int) {
	s.t.Helper()
	queue := ascQueue(ctx, s.t)
	var obj client.Object
	switch opts.Workload {
	case "bare":
		obj = bare.Object(name, runLabels(), bare.Spec{Queue: queue, Head: ascTemplate("head", 0, false),
			Groups: []bare.Group{{Name: "workers", Replicas: int32(workers), Template: ascTemplate("worker", int32(nodeGPUs), true)}}})
	case "vcjob":
		obj = volcanoJob(name, queue, []batchv1alpha1.TaskSpec{{Name: "head", Replicas: 1, Template: ascTemplate("head", 0, false)},
			{Name: "workers", Replicas: int32(workers), Template: ascTemplate("worker", int32(nodeGPUs), true)}})
	case "raycluster":
		obj = rayCluster(name, queue, ascTemplate("ray-head", 0, false), []rayWorkers{{"workers", int32(workers), ascTemplate("ray-worker", int32(nodeGPUs), true)}})
	default:
		gc := gpuCluster(name, int32(workers), int32(nodeGPUs))
		gc.Spec.Head.Template = ascTemplate("head", 0, false)
		gc.Spec.WorkerGroups[0].Template = ascTemplate("worker", 0, true)
		if !nativeGangs() {
			gc.Spec.Scheduling.Queue = queue
		}
		obj = gc
	}
	s.own(name)
	s.recorder.Expect(name, 1+workers, time.Now())
	if err := s.add(ctx, obj); err != nil {
		fatalf(s.t, "creating %s %s: %v", workload().recorded().Kind(), name, err)
	}
	s.gangs[name] = obj
	if w, ok := workload().(selfReconciled); ok {
		if err := w.created(ctx, s, obj); err != nil {
			fatalf(s.t, "creating %s %s's children: %v", workload().recorded().Kind(), name, err)
		}
	}
}

// scaleUpTimeout is how long a gang waiting for new nodes may take to be
// Ready: --ready-timeout on a testbed (Karpenter's kwok nodes register at
// once); on a cluster, real machines boot: at least 15 minutes.
func scaleUpTimeout() time.Duration {
	if cluster.Profile == "cluster" {
		return max(opts.ReadyTimeout, 15*time.Minute)
	}
	return opts.ReadyTimeout
}

// gangPodList lists a gang's live pods: the run's pods in the scenario's
// namespace whose controller is the gang's object, whichever workload.
func (s *scenario) gangPodList(ctx context.Context, gang string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{RunIDLabel: opts.RunID}); err != nil {
		return nil, err
	}
	kind := workload().recorded().Kind()
	var out []corev1.Pod
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == kind && ref.Name == gang {
			out = append(out, p)
		}
	}
	return out, nil
}

func ascScaleUp(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
	ascPrecheck(t)
	s := newScenario(ctx, t, "autoscaling")
	v := readView(ctx, t)
	workers, newNodes := autoscale.ScaleUp(len(v.free), v.pool.RoomNodes(v.nodeGPUs, autoscale.MaxScaleUp), ascBudget())
	if newNodes == 0 {
		skipf(t, "NodePool %s has no room for another %d-GPU node (limit %d GPUs, %d used) or --max-new-nodes is 0", v.pool.Name, v.nodeGPUs, v.pool.LimitGPUs, v.pool.UsedGPUs)
	}
	t.Logf("NodePool %s: %d whole free %d-GPU nodes; a gang of %d workers needs %d more", v.pool.Name, len(v.free), v.nodeGPUs, workers, newNodes)
	w := newNodeWatch(v)
	const gang = "grow"
	s.ascGang(ctx, gang, workers, v.nodeGPUs)
	err := waitFor(ctx, scaleUpTimeout(), func() (bool, string) {
		if err := w.observe(ctx); err != nil {
			return false, err.Error()
		}
		return gangReady(s.recorder.Timelines()[gang]), fmt.Sprintf("%d nodes added (%d Ready); %s", len(w.addedNodes()), len(w.ready), workload().describe(ctx, s, gang))
	})
	if err != nil {
		fatalf(t, "%s %s, %d nodes short of room, not Ready: %v%s", workload().recorded().Kind(), gang, newNodes, err, ascStuck(ctx, s, gang, w))
	}
	pods, err := s.gangPodList(ctx, gang)
	if err != nil {
		fatalf(t, "listing the gang's pods: %v", err)
	}
	holding := map[string]bool{}
	for _, p := range pods {
		holding[p.Spec.NodeName] = true
	}
	// Claims still launching count: a node on its way is one added.
	if err := w.observe(ctx); err != nil {
		fatalf(t, "reading the nodes: %v", err)
	}
	added := w.addedNodes()
	extra := autoscale.ExtraNodes(added, holding)
	tl := s.recorder.Timelines()[gang]
	t.Logf("nodes added: %v (%d holding no member)", added, extra)
	ms := []results.Measurement{
		results.Value("autoscaling", "nodes_needed", "nodes", float64(newNodes)),
		results.Value("autoscaling", "nodes_added", "nodes", float64(len(added))),
		results.Value("autoscaling", "extra_nodes", "nodes", float64(extra)),
	}
	since := func(at time.Time) float64 { return at.Sub(tl.Created).Seconds() }
	if !w.firstSeen.IsZero() {
		ms = append(ms, results.Value("autoscaling", "create_to_first_node", "seconds", since(w.firstSeen)))
	}
	if at, ok := w.readyAt(newNodes); ok {
		ms = append(ms, results.Value("autoscaling", "create_to_nodes_ready", "seconds", since(at)))
	}
	ms = append(ms, results.Value("autoscaling", "create_to_all_bound", "seconds", since(tl.AllBound)),
		results.Value("autoscaling", "create_to_ready", "seconds", since(latest(tl.StatusReady, tl.PodsReady))))
	measured(ms...)
	if len(added) == 0 {
		failf(t, "the gang of %d workers, %d more than the free nodes, bound without a node added: it was not sized past the free capacity", workers, newNodes)
	}
	if extra > opts.MaxExtraNodes {
		failf(t, "the autoscaler added %d nodes for a gang lacking %d; %d hold none of its pods (extra_nodes %d > --max-extra-nodes %d): %v",
			len(added), newNodes, extra, extra, opts.MaxExtraNodes, added)
	}
	// Partial binding while nodes arrive: the recorder's judgement.
	s.checkInvariants()
	return ctx
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// ascStuck explains a gang that waited in vain: no node added while its
// pods were never marked Unschedulable is Volcano's enqueue holding the
// PodGroup (volcano-sh/volcano#2558): Karpenter acts only on pods the
// scheduler marked so.
func ascStuck(ctx context.Context, s *scenario, gang string, w *nodeWatch) string {
	pods, err := s.gangPodList(ctx, gang)
	if err != nil {
		return ""
	}
	marked := 0
	for i := range pods {
		if c := podCondition(&pods[i], corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			marked++
		}
	}
	msg := fmt.Sprintf("; %d pods, %d marked Unschedulable, %d nodes added; %s", len(pods), marked, len(w.addedNodes()), describePodGroup(ctx, s, gang))
	if len(w.addedNodes()) == 0 && len(pods) > 0 && marked == 0 {
		msg += "; no pod was ever marked Unschedulable, so the autoscaler was never asked: the scheduler is holding the gang before placement (Volcano's enqueue, volcano-sh/volcano#2558)"
	}
	return msg
}

func ascTooBig(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
	ascPrecheck(t)
	s := newScenario(ctx, t, "autoscaling")
	v := readView(ctx, t)
	clusterFree, err := clusterFreeGPUs(ctx)
	if err != nil {
		fatalf(t, "reading capacity: %v", err)
	}
	workers := autoscale.TooBig(len(v.free), v.pool.RoomGPUs(), clusterFree, v.nodeGPUs)
	if workers == 0 {
		skipf(t, "NodePool %s has no nvidia.com/gpu limit (or the autoscaler's limits are not visible): no gang is too big for it", v.pool.Name)
	}
	t.Logf("NodePool %s: room for %d GPUs, %d whole free nodes, %d free GPUs in the cluster: a gang of %d %d-GPU workers fits nowhere",
		v.pool.Name, v.pool.RoomGPUs(), len(v.free), clusterFree, workers, v.nodeGPUs)
	w := newNodeWatch(v)
	const gang = "too-big"
	s.ascGang(ctx, gang, workers, v.nodeGPUs)
	verdict := opts.Workload == "gpucluster"
	var gc *gpulabv1alpha1.GPUCluster
	err = waitFor(ctx, opts.WaitWindow, func() (bool, string) {
		if err := w.observe(ctx); err != nil {
			return false, err.Error()
		}
		if added := w.addedNodes(); len(added) > 0 {
			failf(t, "the autoscaler added %v for a gang of %d workers that NodePool %s (room %d GPUs) can never fit", added, workers, v.pool.Name, v.pool.RoomGPUs())
			return true, ""
		}
		if verdict {
			gc = s.get(ctx, gang)
		}
		return false, "no node added for the gang that cannot fit"
	})
	if err == nil || t.Failed() {
		return ctx
	}
	if ctx.Err() != nil {
		fatalf(t, "stopped before the %s window ended: %v", opts.WaitWindow, context.Cause(ctx))
	}
	if !verdict {
		t.Logf("no operator verdict for --workload=%s: only no node added is asserted", opts.Workload)
		return ctx
	}
	if gc == nil {
		gc = s.get(ctx, gang)
	}
	c := meta.FindStatusCondition(gc.Status.Conditions, gpulabv1alpha1.ConditionSchedulable)
	if gc.Status.Phase != gpulabv1alpha1.ClusterUnschedulable || c == nil || c.Reason != gpulabv1alpha1.ReasonNoNodePoolFits {
		failf(t, "the operator did not report the gang no NodePool fits: %s (want phase Unschedulable, reason %s)", describe(gc), gpulabv1alpha1.ReasonNoNodePoolFits)
	}
	return ctx
}

func ascScaleDown(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
	ascPrecheck(t)
	s := newScenario(ctx, t, "autoscaling")
	v := readView(ctx, t)
	window, ok := autoscale.ScaleDownWindow(v.pool.ConsolidateAfter)
	if !ok {
		skipf(t, "NodePool %s never consolidates (consolidateAfter: Never)", v.pool.Name)
	}
	room := v.pool.RoomNodes(v.nodeGPUs, 2)
	if b := ascBudget(); b >= 0 {
		room = min(room, b)
	}
	if len(v.free)+room < 2 {
		skipf(t, "two gangs of one %d-GPU node need 2 nodes of NodePool %s: %d free, room for %d more", v.nodeGPUs, v.pool.Name, len(v.free), room)
	}
	w := newNodeWatch(v)
	const running, emptied = "stays", "goes"
	s.ascGang(ctx, running, 1, v.nodeGPUs)
	s.ascGang(ctx, emptied, 1, v.nodeGPUs)
	for _, g := range []string{running, emptied} {
		err := waitFor(ctx, scaleUpTimeout(), func() (bool, string) {
			_ = w.observe(ctx)
			return gangReady(s.recorder.Timelines()[g]), workload().describe(ctx, s, g)
		})
		if err != nil {
			fatalf(t, "%s %s not Ready: %v%s", workload().recorded().Kind(), g, err, ascStuck(ctx, s, g, w))
		}
	}
	stays, err := s.gangPodList(ctx, running)
	if err != nil {
		fatalf(t, "listing %s's pods: %v", running, err)
	}
	goes, err := s.gangPodList(ctx, emptied)
	if err != nil {
		fatalf(t, "listing %s's pods: %v", emptied, err)
	}
	uids := map[string]string{}
	for _, p := range stays {
		uids[p.Name] = string(p.UID)
	}
	var emptiedNodes []string
	for _, p := range goes {
		if p.Spec.NodeName != "" && !slices.Contains(emptiedNodes, p.Spec.NodeName) && ascNode(ctx, v, p.Spec.NodeName) {
			emptiedNodes = append(emptiedNodes, p.Spec.NodeName)
		}
	}
	deleted := time.Now()
	s.delete(ctx, emptied)
	t.Logf("%s deleted; its nodes %v must go within %s (consolidateAfter %s + %s), %s's %d pods stay", emptied, emptiedNodes, window, v.pool.ConsolidateAfter, autoscale.ScaleDownMargin, running, len(stays))
	var gone time.Time
	err = waitFor(ctx, window, func() (bool, string) {
		if err := s.checkStays(ctx, running, uids); err != "" {
			failf(t, "%s", err)
			return true, ""
		}
		var nodes corev1.NodeList
		if err := cluster.Client.List(ctx, &nodes, client.MatchingLabels(v.selector())); err != nil {
			return false, err.Error()
		}
		left := 0
		for _, n := range nodes.Items {
			if slices.Contains(emptiedNodes, n.Name) {
				left++
			}
		}
		if left == 0 && gone.IsZero() {
			gone = time.Now()
		}
		// The whole window: consolidation runs while the other gang does.
		return false, fmt.Sprintf("%d of %s's %d nodes left, %s untouched", left, emptied, len(emptiedNodes), running)
	})
	if t.Failed() {
		return ctx
	}
	if err != nil && ctx.Err() != nil {
		fatalf(t, "stopped before the %s window ended: %v", window, context.Cause(ctx))
	}
	if gone.IsZero() {
		failf(t, "the nodes %s left empty (%v) were still there %s after its deletion (NodePool %s consolidateAfter %s + %s)",
			emptied, emptiedNodes, window, v.pool.Name, v.pool.ConsolidateAfter, autoscale.ScaleDownMargin)
		return ctx
	}
	measured(results.Value("autoscaling", "delete_to_nodes_gone", "seconds", gone.Sub(deleted).Seconds()))
	s.checkInvariants()
	return ctx
}
