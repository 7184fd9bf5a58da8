package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/probe"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/gfd"
)

// probeTimeout is how long probe pods have to run nvidia-smi, image pull
// included.
const probeTimeout = 5 * time.Minute

// TestAcceleratorAccess, only with --real-gpus: nvidia-smi in a pod holding
// all of a node's GPUs sees the node's GPUInventory (gpulab's own check); a
// pod requesting fewer GPUs sees exactly those, two pods sharing a node
// never see the same GPU, and a pod requesting none sees none (secure
// accelerator access). Probes go through the scheduler to nodes whose GPUs
// are all free (package probe), one node at a time; a node a tenant holds
// GPUs on is skipped, saying so.
func TestAcceleratorAccess(t *testing.T) {
	if !opts.RealGPUs {
		return
	}
	const name = "accelerators"
	f := newPlan(name).
		assess(results.RequirementNone, "a pod holding all of a node's GPUs sees each with the inventory's UUID, product and memory", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			probed := 0
			for _, n := range freeNodes(ctx, t, s) {
				inv, err := nodeInventory(ctx, s, n)
				if err != nil {
					failf(t, "%v", err)
					continue
				}
				seen, unplaced, ok := runProbes(ctx, t, s, n, "all", gpusOf(n))
				if unplaced != "" {
					t.Logf("%s: skipped", unplaced)
				}
				if !ok {
					continue
				}
				probed++
				for _, m := range measure.CompareWithInventory(seen[0], allocatable(t, n, inv.Status)) {
					failf(t, "node %s: %s", n.Name, m)
				}
			}
			if probed == 0 && !t.Failed() {
				skipf(t, "no pool node could be probed: each was taken by other pods meanwhile")
			}
			return ctx
		}).
		assess(results.RequirementSecureAcceleratorAccess, "a pod requesting fewer GPUs than the node has sees exactly those", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			n, inv := sharedNode(ctx, t, s)
			requests := []int64{1}
			if gpusOf(n) >= 4 {
				requests = append(requests, 2)
			}
			for _, k := range requests {
				seen, unplaced, ok := runProbes(ctx, t, s, n, fmt.Sprintf("%dof%d", k, gpusOf(n)), k)
				skipIf(t, unplaced)
				if !ok {
					return ctx
				}
				for _, m := range measure.CheckSubset(seen[0], int(k), inv.Status) {
					failf(t, "node %s, a pod requesting %d of its %d GPUs: %s", n.Name, k, gpusOf(n), m)
				}
			}
			return ctx
		}).
		assess(results.RequirementSecureAcceleratorAccess, "two pods on one node never see the same GPU", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			n, inv := sharedNode(ctx, t, s)
			half := gpusOf(n) / 2
			seen, unplaced, ok := runProbes(ctx, t, s, n, "half", half, half)
			skipIf(t, unplaced)
			if !ok {
				return ctx
			}
			for i := range seen {
				for _, m := range measure.CheckSubset(seen[i], int(half), inv.Status) {
					failf(t, "node %s, pod %d of 2 requesting %d of its %d GPUs: %s", n.Name, i+1, half, gpusOf(n), m)
				}
			}
			for _, m := range measure.Disjoint(seen[0], seen[1]) {
				failf(t, "node %s, two pods requesting %d GPUs each: %s", n.Name, half, m)
			}
			return ctx
		}).
		assess(results.RequirementSecureAcceleratorAccess, "a pod requesting no GPU sees none", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			n := freeNodes(ctx, t, s)[0]
			logs, unplaced, ok := runPods(ctx, t, s, probe.Spec{Name: probe.Name("none", n.Name), Node: n.Name, Image: opts.ProbeImage, RuntimeClass: opts.RuntimeClass})
			skipIf(t, unplaced)
			if !ok {
				return ctx
			}
			visible, gpus, err := probe.NoGPUSeen(logs[0])
			switch {
			case err != nil:
				failf(t, "node %s: %v", n.Name, err)
			case len(gpus) > 0 && visible == "all":
				// The classic leak: the image's NVIDIA_VISIBLE_DEVICES=all
				// is honoured for a pod the kubelet gave no GPU.
				failf(t, "node %s: a pod with no GPU request sees %d GPUs through NVIDIA_VISIBLE_DEVICES=all (its image's default): %v", n.Name, len(gpus), gpus)
			case len(gpus) > 0:
				failf(t, "node %s: a pod with no GPU request sees %d GPUs (NVIDIA_VISIBLE_DEVICES=%s): %v", n.Name, len(gpus), visible, gpus)
			default:
				t.Logf("node %s: no GPU seen (NVIDIA_VISIBLE_DEVICES=%s in the container)", n.Name, visible)
			}
			return ctx
		}).feature()
	testenv.Test(t, f)
}

// skipIf skips t for why, when there is one.
func skipIf(t *testing.T, why string) {
	t.Helper()
	if why != "" {
		skipf(t, "%s", why)
	}
}

// freeNodes are the pool's GPU nodes with every GPU free now; the others
// are logged as skipped.
func freeNodes(ctx context.Context, t *testing.T, s *scenario) []corev1.Node {
	t.Helper()
	nodes, err := gpuNodes(ctx, s.c)
	if err != nil {
		fatalf(t, "listing nodes: %v", err)
	}
	if len(nodes) == 0 {
		fatalf(t, "no node advertises %s", gfd.GPUResource)
	}
	rooms, err := nodeRooms(ctx, s.c)
	if err != nil {
		fatalf(t, "reading capacity: %v", err)
	}
	free := map[string]int{}
	for _, r := range rooms {
		free[r.Name] = r.Free
	}
	var out []corev1.Node
	for _, n := range nodes {
		if int64(free[n.Name]) == gpusOf(n) {
			out = append(out, n)
			continue
		}
		t.Logf("node %s skipped: %d of its %d GPUs are held by other pods", n.Name, gpusOf(n)-int64(free[n.Name]), gpusOf(n))
	}
	if len(out) == 0 {
		skipf(t, "none of the %d pool nodes has all its GPUs free", len(nodes))
	}
	return out
}

func gpusOf(n corev1.Node) int64 {
	q := n.Status.Allocatable[gfd.GPUResource]
	return q.Value()
}

func nodeInventory(ctx context.Context, s *scenario, n corev1.Node) (*gpulabv1alpha1.GPUInventory, error) {
	var inv gpulabv1alpha1.GPUInventory
	if err := s.c.Get(ctx, client.ObjectKey{Name: n.Name}, &inv); err != nil {
		return nil, fmt.Errorf("node %s has %d GPUs but no GPUInventory: %w", n.Name, gpusOf(n), err)
	}
	return &inv, nil
}

// allocatable is the inventory's GPUs a pod holding all of the node's
// allocatable ones can see: all of them, or, when the device plugin
// withholds as many as the agent reports unhealthy, the healthy ones
// (TestInventory accepts either).
func allocatable(t *testing.T, n corev1.Node, st gpulabv1alpha1.GPUInventoryStatus) gpulabv1alpha1.GPUInventoryStatus {
	t.Helper()
	if int(gpusOf(n)) == len(st.GPUs) || gpusOf(n) != int64(st.Summary.Healthy) {
		return st
	}
	healthy := st
	healthy.GPUs = nil
	for _, g := range st.GPUs {
		if g.Health.State == gpulabv1alpha1.GPUHealthy {
			healthy.GPUs = append(healthy.GPUs, g)
		} else {
			t.Logf("node %s: GPU %d (%s) is %s and not allocatable: not expected in the pod", n.Name, g.Index, g.UUID, g.Health.State)
		}
	}
	return healthy
}

// sharedNode is the free GPU node with the most GPUs (the first by name
// among equals), to share between pods, and its inventory; it skips t if no
// free node has 2 GPUs to share.
func sharedNode(ctx context.Context, t *testing.T, s *scenario) (corev1.Node, *gpulabv1alpha1.GPUInventory) {
	t.Helper()
	nodes := freeNodes(ctx, t, s)
	var best corev1.Node
	for _, n := range nodes {
		if gpusOf(n) > gpusOf(best) || (gpusOf(n) == gpusOf(best) && best.Name != "" && n.Name < best.Name) {
			best = n
		}
	}
	if gpusOf(best) < 2 {
		skipf(t, "needs a node with at least 2 GPUs to share between requests; the most any of the %d GPU nodes has is %d", len(nodes), gpusOf(best))
	}
	inv, err := nodeInventory(ctx, s, best)
	if err != nil {
		fatalf(t, "%v", err)
	}
	return best, inv
}

// runProbes runs measure.NvidiaSMIQuery in probe pods on node, one for
// each request (of that many GPUs), all created at once, and returns what
// each saw. It fails t and returns false if a pod did not run or its output
// does not parse.
//
// A lone pod runs nvidia-smi to completion. Several pods each hold their
// GPUs after nvidia-smi (sleeping) until all are seen running at once: a
// pod that had finished would have given its GPUs back, and the next could
// rightly be given the same.
func runProbes(ctx context.Context, t *testing.T, s *scenario, node corev1.Node, kind string, requests ...int64) ([][]measure.SMIGPU, string, bool) {
	t.Helper()
	hold := len(requests) > 1
	var specs []probe.Spec
	for i, gpus := range requests {
		name := kind
		if hold {
			name = fmt.Sprintf("%s-%d", kind, i)
		}
		spec := probe.Spec{Name: probe.Name(name, node.Name), Node: node.Name, GPUs: gpus, Image: opts.ProbeImage, RuntimeClass: opts.RuntimeClass}
		if hold {
			spec.Hold = 2 * probeTimeout
		}
		specs = append(specs, spec)
	}
	logs, unplaced, ok := runPods(ctx, t, s, specs...)
	if !ok {
		return nil, unplaced, false
	}
	var seen [][]measure.SMIGPU
	for i, log := range logs {
		out, _, _ := strings.Cut(log, probe.Done)
		gpus, err := measure.ParseNvidiaSMICSV(strings.NewReader(out))
		if err != nil {
			failf(t, "probe pod %s on %s: reading nvidia-smi: %v", specs[i].Name, node.Name, err)
			return nil, "", false
		}
		seen = append(seen, gpus)
	}
	return seen, "", true
}

// runPods runs probe pods at once and returns their logs once each is done
// (exited 0, or holding and past its query). A pod the scheduler cannot
// place (another tenant took the node's GPUs meanwhile) is not a failure:
// it returns why instead, for the caller to skip that node. A pod that
// failed fails t. The pods are deleted before it returns.
func runPods(ctx context.Context, t *testing.T, s *scenario, specs ...probe.Spec) ([]string, string, bool) {
	t.Helper()
	return runPodsThen(ctx, t, s, nil, specs...)
}

// runPodsThen is runPods, calling then with the pods, as last read, once
// all are done and before they are deleted: a holding pod's claim is still
// allocated then.
func runPodsThen(ctx context.Context, t *testing.T, s *scenario, then func([]*corev1.Pod), specs ...probe.Spec) ([]string, string, bool) {
	t.Helper()
	var pods []*corev1.Pod
	defer func() {
		for _, p := range pods {
			_ = s.c.Delete(context.WithoutCancel(ctx), p, client.GracePeriodSeconds(0))
		}
	}()
	for _, spec := range specs {
		p := probe.Pod(spec)
		if err := s.add(ctx, p); err != nil {
			failf(t, "creating probe pod %s on %s: %v", p.Name, spec.Node, err)
			return nil, "", false
		}
		pods = append(pods, p)
	}
	logs := make([]string, len(pods))
	// nvidia-smi's output is the probe container's termination message:
	// the runner reads no pod logs (its role grants none).
	readLogs := probe.Output
	done := func(i int) bool {
		p := pods[i]
		if specs[i].Hold == 0 {
			return p.Status.Phase == corev1.PodSucceeded
		}
		if p.Status.Phase == corev1.PodRunning && !strings.Contains(logs[i], probe.Done) {
			logs[i] = readLogs(p)
		}
		return p.Status.Phase == corev1.PodRunning && strings.Contains(logs[i], probe.Done)
	}
	unplaced := ""
	// The wait ends when every pod is done, or as soon as one can no
	// longer be.
	err := waitFor(ctx, probeTimeout, func() (bool, string) {
		var states []string
		n := 0
		for i, p := range pods {
			if err := s.c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return false, err.Error()
			}
			if why := probe.Unplaceable(p); why != "" {
				unplaced = p.Name + ": " + why
				return true, ""
			}
			if p.Status.Phase == corev1.PodFailed || specs[i].Hold > 0 && p.Status.Phase == corev1.PodSucceeded {
				return true, ""
			}
			if done(i) {
				n++
			}
			states = append(states, p.Name+": "+podState(p))
		}
		return n == len(pods), strings.Join(states, "; ")
	})
	switch {
	case unplaced != "":
		return nil, fmt.Sprintf("node %s is no longer free: %s", specs[0].Node, unplaced), false
	case err != nil:
		failf(t, "probe pods on %s did not run nvidia-smi: %v", specs[0].Node, err)
		return nil, "", false
	}
	for i, p := range pods {
		if specs[i].Hold == 0 {
			logs[i] = readLogs(p)
		}
		if !done(i) {
			failf(t, "probe pod %s on %s: %s; its log: %q", p.Name, specs[i].Node, podState(p), tail(readLogs(p), 500))
			return nil, "", false
		}
	}
	if then != nil {
		then(pods)
	}
	return logs, "", true
}

// podState is a pod's phase and why it is not running: the kubelet's
// rejection (OutOfnvidia.com/gpu), a container waiting (ErrImagePull) or
// ended.
func podState(p *corev1.Pod) string {
	st := "phase " + string(p.Status.Phase)
	if st == "phase " {
		st = "not started"
	}
	if p.Status.Reason != "" {
		st += fmt.Sprintf(" (%s: %s)", p.Status.Reason, p.Status.Message)
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			st += fmt.Sprintf(", waiting: %s %s", c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			st += fmt.Sprintf(", exited %d: %s %s", c.State.Terminated.ExitCode, c.State.Terminated.Reason, c.State.Terminated.Message)
		}
	}
	return st
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
