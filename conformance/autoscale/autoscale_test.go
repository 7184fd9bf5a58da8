package autoscale

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/karpenter"
)

// gpuResource is the extended resource a NodePool limits.
const gpuResource = string(gfd.GPUResource)

func nodePool(limit any, used any, after string) *unstructured.Unstructured {
	spec := map[string]any{"disruption": map[string]any{"consolidateAfter": after}}
	if limit != nil {
		spec["limits"] = map[string]any{gpuResource: limit}
	}
	obj := map[string]any{"metadata": map[string]any{"name": "gpu"}, "spec": spec}
	if used != nil {
		obj["status"] = map[string]any{"resources": map[string]any{gpuResource: used}}
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestPoolOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		np         *unstructured.Unstructured
		want       Pool
		roomNodes  int
		roomGPUs   int64
		wantWindow time.Duration
		windowOK   bool
	}{
		{"the local testbed's", nodePool("16", "8", "30s"), Pool{karpenter.NodePool{Name: "gpu", LimitGPUs: 16, UsedGPUs: 8, ConsolidateAfter: 30 * time.Second}}, 1, 8, 90 * time.Second, true},
		{"no limit", nodePool(nil, nil, "1m"), Pool{karpenter.NodePool{Name: "gpu", LimitGPUs: -1, ConsolidateAfter: time.Minute}}, 2, -1, 2 * time.Minute, true},
		{"full", nodePool("16", "24", "0s"), Pool{karpenter.NodePool{Name: "gpu", LimitGPUs: 16, UsedGPUs: 24}}, 0, 0, time.Minute, true},
		{"never consolidates", nodePool(int64(32), nil, "Never"), Pool{karpenter.NodePool{Name: "gpu", LimitGPUs: 32, ConsolidateAfter: -1}}, 2, 32, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PoolOf(tc.np)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p, tc.want) {
				t.Errorf("PoolOf = %+v, want %+v", p, tc.want)
			}
			if got := p.RoomNodes(8, MaxScaleUp); got != tc.roomNodes {
				t.Errorf("RoomNodes = %d, want %d", got, tc.roomNodes)
			}
			if got := p.RoomGPUs(); got != tc.roomGPUs {
				t.Errorf("RoomGPUs = %d, want %d", got, tc.roomGPUs)
			}
			w, ok := ScaleDownWindow(p.ConsolidateAfter)
			if w != tc.wantWindow || ok != tc.windowOK {
				t.Errorf("ScaleDownWindow = %s, %v; want %s, %v", w, ok, tc.wantWindow, tc.windowOK)
			}
		})
	}
	if _, err := PoolOf(nodePool("lots", nil, "30s")); err == nil {
		t.Error("a limit that is no quantity was read")
	}
	if _, err := PoolOf(nodePool("16", nil, "soon")); err == nil {
		t.Error("a consolidateAfter that is no duration was read")
	}
}

func TestScaleUp(t *testing.T) {
	for _, tc := range []struct {
		free, room, budget   int
		wantWorkers, wantNew int
	}{
		{0, 2, -1, 2, 2},  // the local testbed: two new nodes
		{1, 2, -1, 3, 2},  // a free NodePool node is used first
		{0, 1, -1, 1, 1},  // the limit leaves one
		{0, 5, 1, 1, 1},   // --max-new-nodes=1
		{2, 0, -1, 2, 0},  // no room: nothing to scale
		{0, 2, 0, 0, 0},   // a zero budget
		{3, 10, 10, 5, 2}, // never more than MaxScaleUp
	} {
		w, n := ScaleUp(tc.free, tc.room, tc.budget)
		if w != tc.wantWorkers || n != tc.wantNew {
			t.Errorf("ScaleUp(%d free, %d room, budget %d) = %d workers, %d new; want %d, %d", tc.free, tc.room, tc.budget, w, n, tc.wantWorkers, tc.wantNew)
		}
	}
}

func TestTooBig(t *testing.T) {
	for _, tc := range []struct {
		name     string
		free     int
		room     int64
		cluster  int64
		nodeGPUs int
		want     int
	}{
		// Two empty fleet nodes (16 free GPUs) outside a 16-GPU NodePool:
		// more than 32 GPUs, 5 nodes, for the operator to refuse it.
		{"local, two fleet nodes", 0, 16, 16, 8, 5},
		// The pool's own node count rules where the cluster has no more.
		{"pool only", 1, 16, 8, 8, 4},
		{"a full pool", 2, 0, 16, 8, 3},
		{"no limit", 0, -1, 16, 8, 0},
	} {
		if got := TooBig(tc.free, tc.room, tc.cluster, tc.nodeGPUs); got != tc.want {
			t.Errorf("%s: TooBig = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestExtraNodes(t *testing.T) {
	holding := map[string]bool{"a": true, "b": true}
	for _, tc := range []struct {
		added []string
		want  int
	}{
		{[]string{"a", "b"}, 0},
		{[]string{"a", "b", "c"}, 1},
		{[]string{"c", "d"}, 2},
		{nil, 0},
	} {
		if got := ExtraNodes(tc.added, holding); got != tc.want {
			t.Errorf("ExtraNodes(%v) = %d, want %d", tc.added, got, tc.want)
		}
	}
}
