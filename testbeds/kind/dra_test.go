package kind

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpulab/gpulab/internal/draclass"
)

// draClaimsGetOnlyTheirDevices switches the cluster's agents to DRA mode
// and proves claims go through the real kubelet and the agent's kubelet
// plugin: the worker's 8 mock GPUs are published in its pool; a claim for
// 2 gives its container exactly the 2 allocated GPUs (their UUIDs in
// NVIDIA_VISIBLE_DEVICES, their device nodes through the claim's CDI
// devices) and a pod with no claim sees none; a claim for the other 6 gets
// the rest, disjoint; one more stays unallocated and its pod unscheduled
// until the first pod is deleted, and then it gets one of the released
// GPUs (which also proves the claim was unprepared: the plugin refuses a
// GPU another prepared claim still holds). gpus maps the worker's UUIDs
// to their device nodes, from its inventory.
func draClaimsGetOnlyTheirDevices(ctx context.Context, t *testing.T, c *Cluster, cs kubernetes.Interface, worker, probe string, gpus map[string]string) {
	t.Helper()
	start := time.Now()
	if err := c.SwitchAgent(ctx, GPUAllocationDRA); err != nil {
		t.Fatal(err)
	}
	uuidOf := map[string]string{} // device name → UUID
	deadline := time.Now().Add(2 * time.Minute)
	for len(uuidOf) != 8 {
		slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + worker})
		if err != nil {
			t.Fatal(err)
		}
		clear(uuidOf)
		for _, s := range slices.Items {
			for _, d := range s.Spec.Devices {
				if s.Spec.Driver == draclass.DriverName && d.Attributes["uuid"].StringValue != nil {
					uuidOf[d.Name] = *d.Attributes["uuid"].StringValue
				}
			}
		}
		if len(uuidOf) != 8 && time.Now().After(deadline) {
			t.Fatalf("%s's pool lists %d devices 2m after the switch to DRA, want 8: %v", worker, len(uuidOf), uuidOf)
		}
		time.Sleep(time.Second)
	}
	for name, u := range uuidOf {
		if gpus[u] == "" {
			t.Errorf("the pool's %s is %s, which is not in %s's inventory", name, u, worker)
		}
	}
	t.Logf("agents switched to DRA, %s's pool of 8 published in %s", worker, time.Since(start).Round(time.Second))

	ns := "dra-probe"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimPod := func(name string, count int64) {
		t.Helper()
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draclass.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count},
			}}}},
		}
		if _, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := probePod(name, "", probe, "serve", ":8080")
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": worker}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: &name}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// sees checks what a claim's container got against its allocation.
	sees := func(name string, count int) []string {
		t.Helper()
		waitPodIP(ctx, t, cs, ns, name)
		claim, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || claim.Status.Allocation == nil {
			t.Fatalf("claim %s of a running pod: %v, allocation %v", name, err, claim.Status.Allocation)
		}
		var allocated, nodes []string
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Pool != worker {
				t.Errorf("claim %s got %s from pool %s, want %s's", name, r.Device, r.Pool, worker)
			}
			allocated = append(allocated, uuidOf[r.Device])
			nodes = append(nodes, gpus[uuidOf[r.Device]])
		}
		slices.Sort(allocated)
		slices.Sort(nodes)
		got := slices.Sorted(slices.Values(probeLine(ctx, t, cs, ns, name, "NVIDIA_VISIBLE_DEVICES")))
		if len(allocated) != count || !slices.Equal(got, allocated) {
			t.Errorf("%s sees GPUs %v, its claim was allocated %v (want %d)", name, got, allocated, count)
		}
		if got := probeLine(ctx, t, cs, ns, name, "GPU_DEVICE_NODES"); !slices.Equal(got, nodes) {
			t.Errorf("%s has device nodes %v, want those of its claim's GPUs %v", name, got, nodes)
		}
		return allocated
	}

	claimPod("two", 2)
	two := sees("two", 2)
	noClaim := probePod("no-claim", "", probe, "serve", ":8080")
	noClaim.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": worker}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, noClaim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodIP(ctx, t, cs, ns, "no-claim")
	for _, key := range []string{"NVIDIA_VISIBLE_DEVICES", "GPU_DEVICE_NODES"} {
		if got := probeLine(ctx, t, cs, ns, "no-claim", key); len(got) != 0 {
			t.Errorf("a pod without a claim got %s %v", key, got)
		}
	}
	claimPod("six", 6)
	if six := sees("six", 6); slices.ContainsFunc(six, func(u string) bool { return slices.Contains(two, u) }) {
		t.Errorf("claims two %v and six %v share a GPU", two, six)
	}

	claimPod("one-more", 1)
	waitUnschedulable(ctx, t, cs, ns, "one-more")
	if claim, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, "one-more", metav1.GetOptions{}); err != nil || claim.Status.Allocation != nil {
		t.Errorf("one-more with every GPU claimed: %v, allocation %+v", err, claim.Status.Allocation)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "two", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if one := sees("one-more", 1); !slices.Contains(two, one[0]) {
		t.Errorf("one-more got %s, not one of the GPUs pod two released %v", one[0], two)
	}
	t.Logf("one-more running on a released GPU %s after pod two's deletion", time.Since(released).Round(time.Second))
}

// waitUnschedulable waits up to a minute for a pod the scheduler marks
// unschedulable, failing if it is bound instead.
func waitUnschedulable(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "" {
			t.Fatalf("%s was bound to %s with every GPU held", name, pod.Spec.NodeName)
		}
		if i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}); i >= 0 {
			t.Logf("%s unschedulable: %s", name, pod.Status.Conditions[i].Message)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was neither bound nor marked unschedulable within 1m", name)
		}
		time.Sleep(time.Second)
	}
}
