package footprint

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpulab/gpulab/internal/gfd"
)

func budget(t *testing.T, s string) Budget {
	t.Helper()
	var b Budget
	if err := b.Set(s); err != nil {
		t.Fatal(err)
	}
	return b
}

func names(nodes []Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func TestBudgetSet(t *testing.T) {
	for _, bad := range []string{"0", "-8", "some", "", "16.5"} {
		var b Budget
		if err := b.Set(bad); err == nil {
			t.Errorf("--max-gpus=%q accepted", bad)
		}
	}
	if b := budget(t, "all"); !b.All || !b.Allows(1<<20) || b.String() != "all" || !b.IsSet() {
		t.Errorf("all: %+v", b)
	}
	if b := budget(t, "16"); b.All || !b.Allows(16) || b.Allows(17) || b.String() != "16" {
		t.Errorf("16: %+v", b)
	}
	if (Budget{}).IsSet() {
		t.Error("the zero budget reads as set")
	}
}

func TestPool(t *testing.T) {
	nodes := []Node{
		{Name: "busy", GPUs: 8, Free: 2},
		{Name: "b", GPUs: 8, Free: 8},
		{Name: "a", GPUs: 8, Free: 8},
		{Name: "small", GPUs: 4, Free: 4},
		{Name: "c", GPUs: 8, Free: 8},
	}
	for _, tc := range []struct {
		budget string
		want   []string
	}{
		// The freest first, by name among equals.
		{"16", []string{"a", "b"}},
		// 20: two whole nodes, then the 4-GPU node fits where an 8 does not.
		{"20", []string{"a", "b", "small"}},
		{"8", []string{"a"}},
		{"4", []string{"small"}},
		{"3", nil},
		{"all", []string{"a", "b", "c", "small", "busy"}},
	} {
		pool := Pool(nodes, budget(t, tc.budget))
		if !reflect.DeepEqual(names(pool), tc.want) {
			t.Errorf("--max-gpus=%s: pool %v, want %v", tc.budget, names(pool), tc.want)
		}
		total := 0
		for _, n := range pool {
			total += n.GPUs
		}
		if b := budget(t, tc.budget); !b.Allows(total) {
			t.Errorf("--max-gpus=%s: the pool holds %d GPUs", tc.budget, total)
		}
	}
}

func TestShapes(t *testing.T) {
	nodes := []Node{{Name: "a", GPUs: 8, Free: 8}, {Name: "b", GPUs: 8, Free: 8}, {Name: "c", GPUs: 8, Free: 3}, {Name: "d", GPUs: 4, Free: 4}}
	r := RoomOf(nodes)
	if r != (Room{Free: 23, Whole: 2, NodeGPUs: 8}) {
		t.Fatalf("room %+v", r)
	}
	if n := LatencyClusters(100, r); n != 2 {
		t.Errorf("latency clusters %d, want 2 (23 free GPUs / 8)", n)
	}
	if n := LatencyClusters(1, r); n != 1 {
		t.Errorf("latency clusters %d at scale 1", n)
	}
	for _, tc := range []struct{ whole, fits, n int }{{0, 0, 1}, {1, 0, 1}, {2, 1, 2}, {4, 2, 3}, {10, 5, 7}} {
		fits, n := Overcommitted(Room{Whole: tc.whole})
		if fits != tc.fits || n != tc.n || (fits > 0 && n <= fits) {
			t.Errorf("overcommitted with %d whole nodes: %d fit, %d gangs; want %d, %d (more gangs than fit)", tc.whole, fits, n, tc.fits, tc.n)
		}
	}
	if w := JobWorkers(Room{Whole: 5}, true); w != 2 {
		t.Errorf("job workers on a queue %d", w)
	}
	for _, whole := range []int{1, 2, 5, 128} {
		if w := JobWorkers(Room{Whole: whole}, false); w > whole || 2*w <= whole {
			t.Errorf("job workers without a queue on %d whole nodes: %d, want one gang to fit and two not", whole, w)
		}
	}
}

func TestBoundGPUs(t *testing.T) {
	gpus := func(req, lim string) corev1.Container {
		c := corev1.Container{}
		if req != "" {
			c.Resources.Requests = corev1.ResourceList{gfd.GPUResource: resource.MustParse(req)}
		}
		if lim != "" {
			c.Resources.Limits = corev1.ResourceList{gfd.GPUResource: resource.MustParse(lim)}
		}
		return c
	}
	pod := func(node string, phase corev1.PodPhase, ctrs ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node, Containers: ctrs}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want int64
	}{
		{"requests of every container", pod("n", corev1.PodRunning, gpus("4", "4"), gpus("2", "")), 6},
		{"limits stand in for requests", pod("n", corev1.PodPending, gpus("", "8")), 8},
		{"not bound yet", pod("", corev1.PodPending, gpus("4", "4")), 0},
		{"succeeded", pod("n", corev1.PodSucceeded, gpus("4", "4")), 0},
		{"failed", pod("n", corev1.PodFailed, gpus("4", "4")), 0},
		{"no GPUs", pod("n", corev1.PodRunning, corev1.Container{}), 0},
	} {
		if got := BoundGPUs(tc.pod); got != tc.want {
			t.Errorf("%s: %d GPUs, want %d", tc.name, got, tc.want)
		}
	}
}

func TestUsable(t *testing.T) {
	for _, tc := range []struct {
		name string
		node corev1.Node
		want string
	}{
		{"plain", corev1.Node{}, ""},
		{"gpu taint", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}}}, ""},
		{"prefer", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "team", Value: "a", Effect: corev1.TaintEffectPreferNoSchedule}}}}, ""},
		{"cordoned", corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}, "cordoned"},
		{"tenant taint", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "team", Value: "a", Effect: corev1.TaintEffectNoSchedule}}}}, "taint team=a:NoSchedule"},
		{"gpu NoExecute", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoExecute}}}}, "taint nvidia.com/gpu=:NoExecute"},
		{"not ready", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}}}}, "taint node.kubernetes.io/not-ready=:NoExecute"},
	} {
		ok, why := Usable(&tc.node)
		if ok != (tc.want == "") || why != tc.want {
			t.Errorf("%s: Usable = %t %q, want %q", tc.name, ok, why, tc.want)
		}
	}
}

func TestRoomOfOtherFleetShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool []Node
		want Room
	}{
		{"8-GPU", []Node{{"a", 8, 8}, {"b", 8, 8}, {"c", 8, 3}}, Room{Free: 19, Whole: 2, NodeGPUs: 8}},
		{"4-GPU", []Node{{"a", 4, 4}, {"b", 4, 4}, {"c", 4, 4}}, Room{Free: 12, Whole: 3, NodeGPUs: 4}},
		{"16-GPU", []Node{{"a", 16, 16}, {"b", 16, 16}}, Room{Free: 32, Whole: 2, NodeGPUs: 16}},
		{"1-GPU", []Node{{"a", 1, 1}, {"b", 1, 0}, {"c", 1, 1}}, Room{Free: 2, Whole: 2, NodeGPUs: 1}},
		{"mixed: most are 4", []Node{{"a", 8, 8}, {"b", 4, 4}, {"c", 4, 4}}, Room{Free: 16, Whole: 2, NodeGPUs: 4}},
		{"mixed tie: the larger", []Node{{"a", 8, 8}, {"b", 4, 4}}, Room{Free: 12, Whole: 1, NodeGPUs: 8}},
		{"empty", nil, Room{}},
	} {
		if got := RoomOf(tc.pool); got != tc.want {
			t.Errorf("%s: RoomOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// Latency clusters fit the nodes: 2 workers of 4, or of a whole
	// smaller node.
	for gpus, want := range map[int]int{8: 4, 4: 4, 2: 2, 1: 1} {
		if got := LatencyWorkerGPUs(Room{NodeGPUs: gpus}); got != want {
			t.Errorf("LatencyWorkerGPUs on %d-GPU nodes = %d, want %d", gpus, got, want)
		}
	}
	if got := LatencyClusters(100, Room{Free: 6, NodeGPUs: 1}); got != 3 {
		t.Errorf("LatencyClusters on 6 free 1-GPU nodes = %d, want 3", got)
	}
}

func TestMIGDevices(t *testing.T) {
	n := corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		"nvidia.com/mig-1g.10gb": resource.MustParse("7"), "nvidia.com/mig-3g.40gb": resource.MustParse("0"), "nvidia.com/gpu": resource.MustParse("1")}}}
	got := MIGDevices(&n)
	if len(got) != 1 || got["1g.10gb"] != 7 {
		t.Errorf("MIGDevices = %v, want 1g.10gb: 7", got)
	}
}
