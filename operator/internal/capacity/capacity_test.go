package capacity

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

func node(name, product string, gpus int64, ready bool) corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{gfd.Product: product, gfd.Memory: "81559"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{gfd.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
		},
	}
}

func inv(name, product string, healthy int32) gpulabv1alpha1.GPUInventory {
	return gpulabv1alpha1.GPUInventory{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status:     gpulabv1alpha1.GPUInventoryStatus{Summary: gpulabv1alpha1.InventorySummary{Count: 8, Healthy: healthy, Product: product, MemoryMiB: 81559}},
	}
}

func TestNodesPrefersInventory(t *testing.T) {
	nodes := []corev1.Node{node("a", h100, 8, true), node("b", h100, 8, true), node("c", h100, 8, false)}
	view, fromInv, _ := Nodes([]gpulabv1alpha1.GPUInventory{inv("a", h100, 7), inv("b", h100, 8), inv("c", h100, 8)}, nil, nodes, nil, time.Now())
	if !fromInv {
		t.Fatal("expected the inventory to be the source")
	}
	// c is NotReady: a and b count, a with the 7 healthy GPUs its agent reports.
	if len(view) != 2 || view[0].Name != "a" || view[0].Healthy != 7 || view[1].Healthy != 8 {
		t.Fatalf("view = %+v, want a with 7 and b with 8 healthy GPUs", view)
	}
	// A partial agent rollout: b has no inventory yet, so it counts from its
	// allocatable instead of as zero GPUs, and watches alone no longer tell
	// of every capacity change.
	view, fromInv, _ = Nodes([]gpulabv1alpha1.GPUInventory{inv("a", h100, 7)}, nil, nodes, nil, time.Now())
	if fromInv || len(view) != 2 || view[0].Healthy != 7 || view[1].Name != "b" || view[1].Healthy != 8 {
		t.Fatalf("partial rollout view = %+v (from inventory %v), want a with 7 (inventory) and b with 8 (allocatable)", view, fromInv)
	}
	view, fromInv, _ = Nodes(nil, nil, nodes, nil, time.Now())
	if fromInv || len(view) != 2 || view[0].Healthy != 8 || view[0].Product != h100 || view[0].MemoryMiB != 81559 {
		t.Fatalf("fallback view = %+v (from inventory %v), want a and b from allocatable and labels", view, fromInv)
	}
}

// TestStaleInventoryIsNotTrusted: an inventory whose agent missed three
// heartbeats, of the inventory or of its Lease, counts from allocatable, is
// named stale, and no longer lets inventory watches alone stand for
// capacity; one without heartbeats (an older agent) is trusted as before.
func TestStaleInventoryIsNotTrusted(t *testing.T) {
	now := time.Now()
	beat := func(i gpulabv1alpha1.GPUInventory, ago time.Duration) gpulabv1alpha1.GPUInventory {
		at := metav1.NewTime(now.Add(-ago))
		i.Status.HeartbeatTime, i.Status.HeartbeatSeconds = &at, 60
		return i
	}
	nodes := []corev1.Node{node("a", h100, 8, true), node("b", h100, 8, true), node("c", h100, 8, true),
		node("d", h100, 8, true), node("e", h100, 8, true)}
	invs := []gpulabv1alpha1.GPUInventory{
		beat(inv("a", h100, 5), 90*time.Second), // late, within 3 heartbeats
		beat(inv("b", h100, 6), 181*time.Second),
		inv("c", h100, 7),                  // no heartbeat promised
		beat(inv("d", h100, 4), time.Hour), // written long ago, its Lease renewed since
		beat(inv("e", h100, 3), time.Hour), // and its Lease too stopped
	}
	leases := Leases{"d": lease(now.Add(-time.Minute), 180), "e": lease(now.Add(-181*time.Second), 180)}
	view, fromInv, stale := Nodes(invs, leases, nodes, nil, now)
	if fromInv {
		t.Error("a stale inventory still counts as the whole truth")
	}
	if len(stale) != 2 || stale[0] != "b" || stale[1] != "e" {
		t.Errorf("stale = %v, want [b e]", stale)
	}
	want := map[string]int32{"a": 5, "b": 8, "c": 7, "d": 4, "e": 8}
	for _, n := range view {
		if n.Healthy != want[n.Name] {
			t.Errorf("node %s: %d healthy, want %d", n.Name, n.Healthy, want[n.Name])
		}
	}
	if len(view) != 5 {
		t.Errorf("view = %+v", view)
	}
}

// lease is a heartbeat Lease renewed at renewed, lasting seconds (0: unset).
func lease(renewed time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}}}
	if seconds > 0 {
		l.Spec.LeaseDurationSeconds = &seconds
	}
	return l
}

// TestStaleAt: the later of the inventory's own heartbeat and its Lease's
// expiry counts; a Lease without a duration lasts three promised periods.
func TestStaleAt(t *testing.T) {
	now := time.Now()
	written := inv("a", h100, 8)
	written.Status.HeartbeatSeconds = 60
	written.Status.HeartbeatTime = &metav1.Time{Time: now}
	leaseOnly := inv("a", h100, 8)
	leaseOnly.Status.HeartbeatSeconds = 60
	for _, tc := range []struct {
		name  string
		inv   gpulabv1alpha1.GPUInventory
		lease *coordinationv1.Lease
		want  time.Duration
		ok    bool
	}{
		{"inventory only", written, nil, 3 * time.Minute, true},
		{"a later Lease", written, lease(now.Add(3*time.Minute), 40), 3*time.Minute + 40*time.Second, true},
		{"an earlier Lease", written, lease(now.Add(-time.Hour), 40), 3 * time.Minute, true},
		{"a Lease without a duration", leaseOnly, lease(now, 0), 3 * time.Minute, true},
		{"a Lease never renewed", leaseOnly, &coordinationv1.Lease{}, 0, false},
		{"no promise", inv("a", h100, 8), lease(now, 40), 0, false},
	} {
		at, ok := StaleAt(&tc.inv, tc.lease)
		if ok != tc.ok || (ok && !at.Equal(now.Add(tc.want))) {
			t.Errorf("%s: StaleAt = %v, %v; want now+%s, %v", tc.name, at.Sub(now), ok, tc.want, tc.ok)
		}
	}
}

func TestCheck(t *testing.T) {
	fleet := []Node{
		{Name: "h0", Product: h100, MemoryMiB: 81559, Healthy: 8},
		{Name: "h1", Product: h100, MemoryMiB: 81559, Healthy: 8},
		{Name: "h2", Product: h100, MemoryMiB: 81559, Healthy: 7},
		{Name: "a0", Product: "NVIDIA-A100-SXM4-40GB", MemoryMiB: 40960, Healthy: 8},
	}
	onH100 := Selector{Product: h100}
	tests := []struct {
		name    string
		demands []Demand
		fits    bool
		message string
	}{
		{name: "two whole H100 nodes fit", fits: true, demands: []Demand{{Group: "w", Selector: onH100, GPUsPerPod: 8, Pods: 2}}},
		{name: "three whole H100 nodes do not: one has a sick GPU", demands: []Demand{{Group: "w", Selector: onH100, GPUsPerPod: 8, Pods: 3}},
			message: "group w needs 3 nodes with ≥8 healthy NVIDIA-H100-80GB-HBM3 GPUs; 2 exist"},
		{name: "half nodes pack", fits: true, demands: []Demand{{Group: "w", Selector: onH100, GPUsPerPod: 4, Pods: 5}}},
		{name: "too many half nodes", demands: []Demand{{Group: "w", Selector: onH100, GPUsPerPod: 4, Pods: 6}},
			message: "group w needs 6 pods with 4 healthy NVIDIA-H100-80GB-HBM3 GPUs each on one node; the matching nodes hold 5"},
		{name: "any product", fits: true, demands: []Demand{{Group: "w", GPUsPerPod: 8, Pods: 3}}},
		{name: "memory floor excludes A100", demands: []Demand{{Group: "w", Selector: Selector{MinMemoryMiB: 80000}, GPUsPerPod: 8, Pods: 3}},
			message: "group w needs 3 nodes with ≥8 healthy ≥80000 MiB GPUs; 2 exist"},
		{name: "unknown product", demands: []Demand{{Group: "w", Selector: Selector{Product: "NVIDIA-B200"}, GPUsPerPod: 1, Pods: 1}},
			message: "no schedulable node has healthy ones (fleet: 1× NVIDIA-A100-SXM4-40GB, 3× NVIDIA-H100-80GB-HBM3)"},
		{name: "groups sharing nodes exceed them together",
			demands: []Demand{{Group: "a", Selector: onH100, GPUsPerPod: 4, Pods: 3}, {Group: "b", Selector: onH100, GPUsPerPod: 4, Pods: 3}},
			message: "the gang needs 24 healthy NVIDIA-H100-80GB-HBM3 GPUs; 23 exist"},
		{name: "CPU-only groups always fit", fits: true, demands: []Demand{{Group: "cpu", Pods: 100}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(fleet, tc.demands)
			if v.Fits != tc.fits {
				t.Fatalf("fits = %v (%s), want %v", v.Fits, v.Message, tc.fits)
			}
			if !tc.fits && !strings.Contains(v.Message, tc.message) {
				t.Errorf("message %q, want it to contain %q", v.Message, tc.message)
			}
		})
	}
}

func TestWholeNodeGPUs(t *testing.T) {
	fleet := []Node{{Name: "h0", Product: h100, Healthy: 7}, {Name: "h1", Product: h100, Healthy: 8}, {Name: "b", Product: "NVIDIA-B200", Healthy: 4}}
	if got := WholeNodeGPUs(fleet, Selector{Product: h100}); got != 8 {
		t.Errorf("H100 whole node = %d, want 8", got)
	}
	if got := WholeNodeGPUs(fleet, Selector{Product: "NVIDIA-A100-SXM4-40GB"}); got != 0 {
		t.Errorf("absent product whole node = %d, want 0", got)
	}
}

func TestNodeChanged(t *testing.T) {
	base := node("a", h100, 8, true)
	heartbeat := *base.DeepCopy()
	heartbeat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	heartbeat.ResourceVersion = "2"
	if NodeChanged(&base, &heartbeat) {
		t.Error("a status heartbeat changes nothing the view reads")
	}
	for name, edit := range map[string]func(*corev1.Node){
		"not ready":     func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse },
		"cordoned":      func(n *corev1.Node) { n.Spec.Unschedulable = true },
		"fewer GPUs":    func(n *corev1.Node) { n.Status.Allocatable[gfd.GPUResource] = resource.MustParse("4") },
		"other product": func(n *corev1.Node) { n.Labels[gfd.Product] = "NVIDIA-A100" },
		"other memory":  func(n *corev1.Node) { n.Labels[gfd.Memory] = "40960" },
	} {
		changed := base.DeepCopy()
		edit(changed)
		if !NodeChanged(&base, changed) {
			t.Errorf("%s: the view depends on it", name)
		}
	}
}

func TestInventoryChanged(t *testing.T) {
	now := time.Now()
	beat := func(i gpulabv1alpha1.GPUInventory, ago time.Duration, every int32) *gpulabv1alpha1.GPUInventory {
		i.Status.HeartbeatSeconds = every
		i.Status.HeartbeatTime = &metav1.Time{Time: now.Add(-ago)}
		return &i
	}
	fresh := beat(inv("a", h100, 8), 10*time.Second, 60)
	for _, tc := range []struct {
		name     string
		was, now *gpulabv1alpha1.GPUInventory
		want     bool
	}{
		{"a fresh inventory's heartbeat", fresh, beat(inv("a", h100, 8), 0, 60), false},
		{"a GPU fell sick", fresh, beat(inv("a", h100, 7), 0, 60), true},
		{"a stale inventory's heartbeat makes it fresh", beat(inv("a", h100, 8), time.Hour, 60), fresh, true},
		{"a shorter heartbeat brings staleness forward", fresh, beat(inv("a", h100, 8), 10*time.Second, 5), true},
		{"a first heartbeat promise", func() *gpulabv1alpha1.GPUInventory { i := inv("a", h100, 8); return &i }(), fresh, true},
	} {
		if got := InventoryChanged(tc.was, tc.now, nil, now); got != tc.want {
			t.Errorf("%s: InventoryChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
	// An inventory written again on change or resync, its Lease fresh.
	renewed := lease(now, 180)
	if InventoryChanged(beat(inv("a", h100, 8), time.Hour, 60), beat(inv("a", h100, 8), 0, 60), renewed, now) {
		t.Error("a rewrite of an inventory whose Lease is fresh woke its clusters")
	}
}

// TestLeaseChanged: a fresh Lease's renewal wakes no cluster; a renewal
// that makes a stale inventory fresh, or a first Lease, does.
func TestLeaseChanged(t *testing.T) {
	now := time.Now()
	old := inv("a", h100, 8)
	old.Status.HeartbeatSeconds = 60
	old.Status.HeartbeatTime = &metav1.Time{Time: now.Add(-time.Hour)}
	for _, tc := range []struct {
		name     string
		was, now *coordinationv1.Lease
		want     bool
	}{
		{"a fresh Lease renewed", lease(now.Add(-time.Minute), 180), lease(now, 180), false},
		{"a stale Lease renewed", lease(now.Add(-time.Hour), 180), lease(now, 180), true},
		{"a first renewal", &coordinationv1.Lease{}, lease(now, 180), true},
		{"a shorter Lease", lease(now, 180), lease(now, 60), true},
	} {
		if got := LeaseChanged(&old, tc.was, tc.now, now); got != tc.want {
			t.Errorf("%s: LeaseChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDRADevices: a group that claims its GPUs counts its DeviceClass's
// devices on each node, not the node's healthy GPUs, and a node that
// offers devices through another driver (no inventory, no nvidia.com/gpu)
// still counts.
func TestDRADevices(t *testing.T) {
	bare := node("d", "", 0, true)
	bare.Labels = nil
	nodes := []corev1.Node{node("a", h100, 8, true), bare}
	devices := map[string]map[string]int32{"a": {"gpu.gpulab.io": 6}, "d": {"gpu.nvidia.com": 8}}
	view, _, _ := Nodes([]gpulabv1alpha1.GPUInventory{inv("a", h100, 8)}, nil, nodes, devices, time.Now())
	if len(view) != 2 || view[1].Name != "d" || view[1].Healthy != 0 || view[1].Devices["gpu.nvidia.com"] != 8 {
		t.Fatalf("view %+v: want a, and d with 8 devices of gpu.nvidia.com only", view)
	}
	gpulab, nvidia := Selector{DeviceClass: "gpu.gpulab.io"}, Selector{DeviceClass: "gpu.nvidia.com"}
	if got := WholeNodeGPUs(view, gpulab); got != 6 {
		t.Errorf("whole node of gpu.gpulab.io: %d, want a's 6 devices", got)
	}
	for _, tc := range []struct {
		demand Demand
		fits   bool
		msg    string
	}{
		{Demand{Group: "w", Selector: gpulab, GPUsPerPod: 3, Pods: 2}, true, ""},
		{Demand{Group: "w", Selector: gpulab, GPUsPerPod: 4, Pods: 2}, false, "group w needs 2 nodes with ≥4 healthy devices of DeviceClass gpu.gpulab.io; 1 exist"},
		{Demand{Group: "w", Selector: nvidia, GPUsPerPod: 8, Pods: 1}, true, ""},
		{Demand{Group: "w", Selector: Selector{DeviceClass: "mig.nvidia.com"}, GPUsPerPod: 1, Pods: 1}, false, "group w needs devices of DeviceClass mig.nvidia.com; no schedulable node has healthy ones"},
		// The extended resource still counts healthy GPUs: a's 8.
		{Demand{Group: "w", GPUsPerPod: 8, Pods: 1}, true, ""},
	} {
		v := Check(view, []Demand{tc.demand})
		if v.Fits != tc.fits || !strings.Contains(v.Message, tc.msg) {
			t.Errorf("%+v: %+v, want fits %v, %q", tc.demand, v, tc.fits, tc.msg)
		}
	}
}
