package conformance

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/gpulab/gpulab/conformance/dra"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/probe"
	"github.com/gpulab/gpulab/conformance/results"
)

// TestDRA is the dra_support (KAR-0051) plan: GPUs handed out through
// Dynamic Resource Allocation, judged from the claims' allocations. The
// DeviceClass (--device-class) selects published devices in node-local
// pools; claims for 1, 2, half and all of a node's devices are each
// allocated from that node's pool; claims filling two nodes never share a
// device; a claim larger than any pool stays unallocated and its pod
// unscheduled; a deleted pod's devices go to the claim waiting for them.
// Its pods go to the default scheduler, which allocates claims; gangs that
// claim GPUs are the gang features' business.
func TestDRA(t *testing.T) {
	const name = "dra"
	f := newPlan(name).
		assess(results.RequirementDRASupport, "the DeviceClass selects published devices in node-local pools", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			pools := draPools(ctx, t)
			n := 0
			for _, p := range pools {
				n += len(p.Devices)
			}
			t.Logf("DeviceClass %s: %d devices in %d node-local pools of the footprint", opts.DeviceClass, n, len(pools))
			measured(results.Value(name, "devices", "devices", float64(n)), results.Value(name, "pools", "pools", float64(len(pools))))
			return ctx
		}).
		assess(results.RequirementDRASupport, "claims for 1, 2, half and all of a node's devices are each allocated from that node's pool", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			pool := draFreest(ctx, t, 2)
			n := len(pool.Devices)
			for i, k := range slices.Compact([]int{1, 2, n / 2, n}) {
				pod := s.draPod(ctx, "count-"+strconv.Itoa(k), k, pool.Node)
				claim := s.draWaitAllocated(ctx, pod)
				got := dra.Allocated([]resourceapi.ResourceClaim{*claim})[client.ObjectKeyFromObject(claim)]
				if len(got) != k {
					failf(t, "a claim for %d devices was allocated %d: %v", k, len(got), got)
				}
				for _, d := range got {
					if d.Driver != pool.Driver || d.Pool != pool.Name {
						failf(t, "a claim for %d devices of %s's pool got %s", k, pool.Node, d)
					}
				}
				s.draDelete(ctx, pod)
				if i == 0 {
					t.Logf("pool %s/%s on %s: %d free devices", pool.Driver, pool.Name, pool.Node, n)
				}
			}
			return ctx
		}).
		assess(results.RequirementDRASupport, "claims filling two nodes never share a device", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			free := draFree(ctx, t)
			var nodes []string
			want := 0
			for _, p := range free {
				if len(p.Devices) >= 2 && len(nodes) < 2 {
					nodes = append(nodes, p.Node)
					want += len(p.Devices) / 2
				}
			}
			if len(nodes) < 2 {
				skipf(t, "needs two node-local pools with 2 free devices of %s in the footprint, found %d", opts.DeviceClass, len(nodes))
			}
			var pods []*corev1.Pod
			for i := range want {
				pods = append(pods, s.draPod(ctx, "fill-"+strconv.Itoa(i), 2, nodes...))
			}
			for _, p := range pods {
				s.draWaitAllocated(ctx, p)
			}
			checkNoSharedDevices(ctx, t)
			return ctx
		}).
		assess(results.RequirementDRASupport, "a claim larger than any pool stays unallocated and its pod unscheduled", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			pools := draPools(ctx, t)
			largest := 0
			var nodes []string
			for _, p := range pools {
				largest = max(largest, len(p.Devices))
				nodes = append(nodes, p.Node)
			}
			pod := s.draPod(ctx, "too-big", largest+1, nodes...)
			err := waitFor(ctx, opts.WaitWindow, func() (bool, string) {
				if err := s.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
					return false, err.Error()
				}
				if pod.Spec.NodeName != "" {
					failf(t, "a pod claiming %d devices, one more than the largest pool, was bound to %s", largest+1, pod.Spec.NodeName)
					return true, ""
				}
				if c := draClaimOf(ctx, s, pod); c != nil && c.Status.Allocation != nil {
					failf(t, "a claim for %d devices, one more than the largest pool, was allocated", largest+1)
					return true, ""
				}
				return false, "the too-big claim stays unallocated"
			})
			if err == nil || t.Failed() {
				return ctx
			}
			if ctx.Err() != nil {
				fatalf(t, "stopped before the %s window ended: %v", opts.WaitWindow, context.Cause(ctx))
			}
			if c := podCondition(pod, corev1.PodScheduled); c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
				failf(t, "the scheduler never marked the too-big claim's pod Unschedulable: %+v", c)
			}
			return ctx
		}).
		assess(results.RequirementDRASupport, "a deleted pod's devices go to the claim waiting for them", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			pool := draFreest(ctx, t, 1)
			n := len(pool.Devices)
			first := s.draPod(ctx, "first", n, pool.Node)
			held := dra.Allocated([]resourceapi.ResourceClaim{*s.draWaitAllocated(ctx, first)})
			next := s.draPod(ctx, "next", n, pool.Node)
			err := waitFor(ctx, opts.ReadyTimeout, func() (bool, string) {
				if err := s.c.Get(ctx, client.ObjectKeyFromObject(next), next); err != nil {
					return false, err.Error()
				}
				c := podCondition(next, corev1.PodScheduled)
				return next.Spec.NodeName == "" && c != nil && c.Status == corev1.ConditionFalse, "the second claim for the node's devices waits"
			})
			if next.Spec.NodeName != "" {
				failf(t, "a second claim for all %d devices of %s was placed while the first held them", n, pool.Node)
			}
			if err != nil {
				fatalf(t, "%v", err)
			}
			s.draDelete(ctx, first)
			claim := s.draWaitAllocated(ctx, next)
			var before, after []string
			for _, devs := range held {
				for _, d := range devs {
					before = append(before, d.String())
				}
			}
			for _, d := range dra.Allocated([]resourceapi.ResourceClaim{*claim})[client.ObjectKeyFromObject(claim)] {
				after = append(after, d.String())
			}
			slices.Sort(before)
			slices.Sort(after)
			if !slices.Equal(before, after) {
				failf(t, "the waiting claim got %v, not the released %v", after, before)
			}
			checkNoSharedDevices(ctx, t)
			return ctx
		})
	if opts.RealGPUs {
		f = f.assess(results.RequirementSecureAcceleratorAccess, "a container claiming half of a node's devices sees exactly those, and one claiming none sees none (nvidia-smi)", draContainersSeeTheirDevices)
	}
	testenv.Test(t, f.feature())
}

// draContainersSeeTheirDevices (--real-gpus) runs nvidia-smi in two pods
// on the freest node at once: one claims half its devices of
// --device-class and holds them, so its claim stays allocated while it is
// read; it must see exactly those, by the uuid their ResourceSlice
// publishes. The other claims nothing and must see no GPU.
func draContainersSeeTheirDevices(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
	s := newScenario(ctx, t, "dra")
	pool := draFreest(ctx, t, 1)
	k := max(len(pool.Devices)/2, 1)
	name := probe.Name("claim", pool.Node)
	s.draClaimTemplate(ctx, name, k)
	claimed := probe.Spec{Name: name, Node: pool.Node, GPUs: int64(k), ClaimTemplate: name, Hold: 2 * probeTimeout, Image: opts.ProbeImage, RuntimeClass: opts.RuntimeClass}
	none := probe.Spec{Name: probe.Name("noclaim", pool.Node), Node: pool.Node, Image: opts.ProbeImage, RuntimeClass: opts.RuntimeClass}
	var claim *resourceapi.ResourceClaim
	logs, unplaced, ok := runPodsThen(ctx, t, s, func(pods []*corev1.Pod) { claim = draClaimOf(ctx, s, pods[0]) }, claimed, none)
	skipIf(t, unplaced)
	if !ok {
		return ctx
	}
	if claim == nil || claim.Status.Allocation == nil {
		fatalf(t, "pod %s ran without an allocated claim", claimed.Name)
	}
	devs := dra.Allocated([]resourceapi.ResourceClaim{*claim})[client.ObjectKeyFromObject(claim)]
	var published resourceapi.ResourceSliceList
	if err := s.c.List(ctx, &published); err != nil {
		fatalf(t, "listing ResourceSlices: %v", err)
	}
	uuids, err := dra.UUIDs(published.Items, devs)
	if err != nil {
		fatalf(t, "%v", err)
	}
	out, _, _ := strings.Cut(logs[0], probe.Done)
	seen, err := measure.ParseNvidiaSMICSV(strings.NewReader(out))
	if err != nil {
		fatalf(t, "probe pod %s on %s: reading nvidia-smi: %v", claimed.Name, pool.Node, err)
	}
	for _, m := range measure.CheckClaimed(seen, uuids) {
		failf(t, "node %s, a pod claiming %d of its %d free devices: %s", pool.Node, k, len(pool.Devices), m)
	}
	visible, gpus, err := probe.NoGPUSeen(logs[1])
	switch {
	case err != nil:
		failf(t, "node %s: %v", pool.Node, err)
	case len(gpus) > 0:
		failf(t, "node %s: a pod claiming no device sees %d GPUs (NVIDIA_VISIBLE_DEVICES=%s): %v", pool.Node, len(gpus), visible, gpus)
	}
	return ctx
}

// draPools are the device class's node-local pools in the footprint; the
// assessment skips where the cluster serves no DRA or has no such class.
func draPools(ctx context.Context, t *testing.T) []dra.Pool {
	t.Helper()
	if _, err := cluster.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: resourceapi.GroupName, Kind: "DeviceClass"}, "v1"); err != nil {
		skipf(t, "the cluster does not serve resource.k8s.io/v1 (Dynamic Resource Allocation): %v", err)
	}
	pools, err := dra.ClassPools(ctx, cluster.Client, opts.DeviceClass)
	if apierrors.IsNotFound(err) {
		skipf(t, "no DeviceClass %s: no DRA driver for GPUs here (--device-class names another, e.g. gpu.nvidia.com)", opts.DeviceClass)
	}
	if err != nil {
		fatalf(t, "%v", err)
	}
	pools = slices.DeleteFunc(pools, func(p dra.Pool) bool { return !fp.has(p.Node) })
	if len(pools) == 0 {
		failf(t, "DeviceClass %s selects no device in a node-local pool of the footprint's nodes", opts.DeviceClass)
		t.FailNow()
	}
	return pools
}

// draFree are the footprint's pools with only their devices no claim holds.
func draFree(ctx context.Context, t *testing.T) []dra.Pool {
	t.Helper()
	pools := draPools(ctx, t)
	var claims resourceapi.ResourceClaimList
	if err := cluster.Client.List(ctx, &claims); err != nil {
		fatalf(t, "listing ResourceClaims: %v", err)
	}
	return dra.Free(pools, dra.Allocated(claims.Items))
}

// draFreest is the pool with the most free devices; the assessment skips
// below least.
func draFreest(ctx context.Context, t *testing.T, least int) dra.Pool {
	t.Helper()
	var best dra.Pool
	for _, p := range draFree(ctx, t) {
		if len(p.Devices) > len(best.Devices) {
			best = p
		}
	}
	if len(best.Devices) < least {
		skipf(t, "needs a node-local pool with %d free devices of %s in the footprint, the freest has %d", least, opts.DeviceClass, len(best.Devices))
	}
	return best
}

// checkNoSharedDevices fails when any two claims of the cluster hold one
// device: the allocator's promise, checked from every claim, not only the
// run's.
func checkNoSharedDevices(ctx context.Context, t *testing.T) {
	t.Helper()
	var claims resourceapi.ResourceClaimList
	if err := cluster.Client.List(ctx, &claims); err != nil {
		fatalf(t, "listing ResourceClaims: %v", err)
	}
	if shared := dra.Shared(dra.Allocated(claims.Items)); len(shared) > 0 {
		failf(t, "devices held by two claims at once: %v", shared)
	}
}

// draPod creates a pod whose claim, from a ResourceClaimTemplate of its
// own, asks for exactly count devices of --device-class, kept to nodes.
// The default scheduler places it and allocates the claim.
func (s *scenario) draPod(ctx context.Context, name string, count int, nodes ...string) *corev1.Pod {
	s.t.Helper()
	pod := s.draPodFor(ctx, name, count, nodes...)
	if err := s.add(ctx, pod); err != nil {
		fatalf(s.t, "creating pod %s: %v", name, err)
	}
	return pod
}

// draPodFor creates draPod's ResourceClaimTemplate and returns its pod,
// not yet created.
func (s *scenario) draPodFor(ctx context.Context, name string, count int, nodes ...string) *corev1.Pod {
	s.t.Helper()
	s.draClaimTemplate(ctx, name, count)
	spec := podTemplate("dra", 0).Spec
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &name}}
	spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	// A node-name field selector takes one value: one term (ORed) a node.
	terms := make([]corev1.NodeSelectorTerm, 0, len(nodes))
	for _, n := range nodes {
		terms = append(terms, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}})
	}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: runLabels()}, Spec: spec}
}

// draClaimTemplate creates the ResourceClaimTemplate name, asking for
// exactly count devices of --device-class.
func (s *scenario) draClaimTemplate(ctx context.Context, name string, count int) {
	s.t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: opts.DeviceClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(count)}}},
		}}}}
	if err := s.add(ctx, tmpl); err != nil {
		fatalf(s.t, "creating ResourceClaimTemplate %s: %v", name, err)
	}
}

// draHeld is how many devices of --device-class claims hold on each node:
// with --gpu-allocation=dra the gangs' GPUs, which no pod requests as
// nvidia.com/gpu.
func draHeld(ctx context.Context, c client.Client) (map[string]int64, error) {
	pools, err := dra.ClassPools(ctx, c, opts.DeviceClass)
	if err != nil {
		return nil, err
	}
	node := map[[2]string]string{}
	for _, p := range pools {
		node[[2]string{p.Driver, p.Name}] = p.Node
	}
	var claims resourceapi.ResourceClaimList
	if err := c.List(ctx, &claims); err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	held := map[string]int64{}
	for _, devs := range dra.Allocated(claims.Items) {
		for _, d := range devs {
			if n, ok := node[[2]string{d.Driver, d.Pool}]; ok {
				held[n]++
			}
		}
	}
	return held, nil
}

// draClaimOf is the claim generated for pod's template, nil before the
// resource claim controller made it.
func draClaimOf(ctx context.Context, s *scenario, pod *corev1.Pod) *resourceapi.ResourceClaim {
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		var c resourceapi.ResourceClaim
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: *st.ResourceClaimName}, &c); err == nil {
			return &c
		}
	}
	return nil
}

// draWaitAllocated waits until pod is bound and its claim allocated, and
// returns the claim.
func (s *scenario) draWaitAllocated(ctx context.Context, pod *corev1.Pod) *resourceapi.ResourceClaim {
	s.t.Helper()
	var claim *resourceapi.ResourceClaim
	err := waitFor(ctx, opts.ReadyTimeout, func() (bool, string) {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		claim = draClaimOf(ctx, s, pod)
		return pod.Spec.NodeName != "" && claim != nil && claim.Status.Allocation != nil,
			fmt.Sprintf("pod %s bound to %q, its claim allocated: %v", pod.Name, pod.Spec.NodeName, claim != nil && claim.Status.Allocation != nil)
	})
	if err != nil {
		fatalf(s.t, "%v", err)
	}
	return claim
}

// draDelete deletes pod and waits until its claim is gone with it, so its
// devices are free for what comes next.
func (s *scenario) draDelete(ctx context.Context, pod *corev1.Pod) {
	s.t.Helper()
	claim := draClaimOf(ctx, s, pod)
	if err := s.c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		fatalf(s.t, "deleting pod %s: %v", pod.Name, err)
	}
	err := waitFor(ctx, opts.ReadyTimeout, func() (bool, string) {
		podGone := apierrors.IsNotFound(s.c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
		claimGone := claim == nil || apierrors.IsNotFound(s.c.Get(ctx, client.ObjectKeyFromObject(claim), &resourceapi.ResourceClaim{}))
		return podGone && claimGone, fmt.Sprintf("pod %s and its claim going", pod.Name)
	})
	if err != nil {
		fatalf(s.t, "%v", err)
	}
}

// podCondition is pod's condition of type ct, nil without one.
func podCondition(pod *corev1.Pod, ct corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == ct {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
