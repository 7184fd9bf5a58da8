package conformance

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/gfd"
)

// probeTimeout is how long probe pods have to run nvidia-smi, image pull
// included.
const probeTimeout = 5 * time.Minute

// probeDone is the line a holding probe prints after nvidia-smi's output.
const probeDone = "gpulab-probe-done"

// TestAcceleratorAccess, only with --real-gpus: nvidia-smi in a pod holding
// all of a node's GPUs sees the node's GPUInventory (gpulab's own check); a
// pod requesting fewer GPUs sees exactly those, and two pods sharing a node
// never see the same GPU (secure accelerator access). Pods are pinned by
// spec.nodeName, one node at a time.
func TestAcceleratorAccess(t *testing.T) {
	if !opts.RealGPUs {
		return
	}
	const name = "accelerators"
	f := newPlan(name).
		assess(results.RequirementNone, "a pod holding all of a node's GPUs sees each with the inventory's UUID, product and memory", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			nodes, err := gpuNodes(ctx, s.c)
			if err != nil {
				fatalf(t, "listing nodes: %v", err)
			}
			if len(nodes) == 0 {
				fatalf(t, "no node advertises %s", gfd.GPUResource)
			}
			for _, n := range nodes {
				inv, err := nodeInventory(ctx, s, n)
				if err != nil {
					failf(t, "%v", err)
					continue
				}
				seen, ok := runProbes(ctx, t, s, n, "all", gpusOf(n))
				if !ok {
					continue
				}
				for _, m := range measure.CompareWithInventory(seen[0], allocatable(t, n, inv.Status)) {
					failf(t, "node %s: %s", n.Name, m)
				}
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
				seen, ok := runProbes(ctx, t, s, n, fmt.Sprintf("%dof%d", k, gpusOf(n)), k)
				if !ok {
					continue
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
			seen, ok := runProbes(ctx, t, s, n, "half", half, half)
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
		}).feature()
	testenv.Test(t, f)
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

// sharedNode is the GPU node with the most GPUs (the first by name among
// equals), to share between pods, and its inventory; it skips t if no node
// has 2 GPUs to share.
func sharedNode(ctx context.Context, t *testing.T, s *scenario) (corev1.Node, *gpulabv1alpha1.GPUInventory) {
	t.Helper()
	nodes, err := gpuNodes(ctx, s.c)
	if err != nil {
		fatalf(t, "listing nodes: %v", err)
	}
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

// runProbes runs measure.NvidiaSMIQuery in pods pinned to node, one for
// each request (of that many GPUs), all created at once, and returns what
// each saw. It fails t and returns false if a pod did not run or its output
// does not parse, and deletes the pods before it returns.
//
// A lone pod runs nvidia-smi to completion. Several pods each hold their
// GPUs after nvidia-smi (sleeping) until all are seen running at once: a
// pod that had finished would have given its GPUs back, and the next could
// rightly be given the same.
func runProbes(ctx context.Context, t *testing.T, s *scenario, node corev1.Node, kind string, requests ...int64) ([][]measure.SMIGPU, bool) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		fatalf(t, "%v", err)
	}
	hold := len(requests) > 1
	var pods []*corev1.Pod
	defer func() {
		for _, p := range pods {
			_ = s.c.Delete(context.WithoutCancel(ctx), p, client.GracePeriodSeconds(0))
		}
	}()
	for i, gpus := range requests {
		name := kind
		if hold {
			name = fmt.Sprintf("%s-%d", kind, i)
		}
		p := probePod(probeName(name, node.Name), node.Name, gpus, hold)
		if err := s.createPod(ctx, p); err != nil {
			failf(t, "creating probe pod %s on %s: %v", p.Name, node.Name, err)
			return nil, false
		}
		pods = append(pods, p)
	}
	logs := make([]string, len(pods))
	readLogs := func(p *corev1.Pod) string {
		limit := int64(1 << 20)
		b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "probe", LimitBytes: &limit}).DoRaw(ctx)
		if err != nil {
			return ""
		}
		return string(b)
	}
	// The wait ends when every pod is done, or as soon as one can no
	// longer be.
	err = waitFor(ctx, probeTimeout, func() (bool, string) {
		var states []string
		done := 0
		for i, p := range pods {
			if err := s.c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return false, err.Error()
			}
			switch {
			case p.Status.Phase == corev1.PodFailed, hold && p.Status.Phase == corev1.PodSucceeded:
				return true, ""
			case !hold && p.Status.Phase == corev1.PodSucceeded:
				done++
			case hold && p.Status.Phase == corev1.PodRunning:
				if !strings.Contains(logs[i], probeDone) {
					logs[i] = readLogs(p)
				}
				if strings.Contains(logs[i], probeDone) {
					done++
				}
			}
			states = append(states, p.Name+": "+podState(p))
		}
		return done == len(pods), strings.Join(states, "; ")
	})
	if err != nil {
		failf(t, "probe pods on %s did not run nvidia-smi: %v", node.Name, err)
		return nil, false
	}
	var seen [][]measure.SMIGPU
	for i, p := range pods {
		if !hold {
			logs[i] = readLogs(p)
		}
		ok := p.Status.Phase == corev1.PodSucceeded
		if hold {
			ok = p.Status.Phase == corev1.PodRunning && strings.Contains(logs[i], probeDone)
		}
		if !ok {
			failf(t, "probe pod %s on %s: %s; its log: %q", p.Name, node.Name, podState(p), tail(readLogs(p), 500))
			return nil, false
		}
		out, _, _ := strings.Cut(logs[i], probeDone)
		gpus, err := measure.ParseNvidiaSMICSV(strings.NewReader(out))
		if err != nil {
			failf(t, "probe pod %s on %s: reading nvidia-smi: %v", p.Name, node.Name, err)
			return nil, false
		}
		seen = append(seen, gpus)
	}
	return seen, true
}

// probePod runs the query on node holding gpus GPUs, tolerating every
// taint; with hold it sleeps after, printing probeDone once the query has.
func probePod(name, node string, gpus int64, hold bool) *corev1.Pod {
	command := measure.NvidiaSMIQuery
	if hold {
		command = []string{"sh", "-c", strings.Join(measure.NvidiaSMIQuery, " ") + " && echo " + probeDone + " && exec sleep " + fmt.Sprint(int(2*probeTimeout.Seconds()))}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "probe", Image: opts.ProbeImage, Command: command,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gfd.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}},
			}},
		},
	}
}

// probeName is a DNS label naming kind's probe on node: node names can be
// long and hold dots, so such a name is cut and ends in a hash of the node
// name, which keeps it unique.
func probeName(kind, node string) string {
	name := "smi-" + kind + "-" + node
	if len(name) <= 63 && !strings.Contains(name, ".") {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	name = strings.ReplaceAll(name, ".", "-")
	if len(name) > 63-len(suffix) {
		name = name[:63-len(suffix)]
	}
	return strings.TrimRight(name, "-") + suffix
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
