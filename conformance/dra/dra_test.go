package dra

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestSharedAndFree(t *testing.T) {
	a, b, c := types.NamespacedName{Namespace: "n", Name: "a"}, types.NamespacedName{Namespace: "n", Name: "b"}, types.NamespacedName{Namespace: "n", Name: "c"}
	d := func(name string) Device { return Device{"gpu.gpulab.io", "node-1", name} }
	held := map[types.NamespacedName][]Device{a: {d("gpu-0"), d("gpu-1")}, b: {d("gpu-2")}}
	if s := Shared(held); len(s) != 0 {
		t.Errorf("disjoint claims reported shared: %v", s)
	}
	held[c] = []Device{d("gpu-1")}
	if s := Shared(held); len(s) != 1 || s[0] != "gpu.gpulab.io/node-1/gpu-1: n/a, n/c" {
		t.Errorf("shared = %v", s)
	}
	free := Free([]Pool{{Driver: "gpu.gpulab.io", Name: "node-1", Node: "node-1", Devices: []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}}}, held)
	if len(free) != 1 || len(free[0].Devices) != 1 || free[0].Devices[0] != "gpu-3" {
		t.Errorf("free = %+v", free)
	}
}
