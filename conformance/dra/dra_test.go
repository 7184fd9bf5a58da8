package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
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

func TestUUIDs(t *testing.T) {
	dev := func(name, uuid string) resourceapi.Device {
		d := resourceapi.Device{Name: name}
		if uuid != "" {
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{UUIDAttribute: {StringValue: &uuid}}
		}
		return d
	}
	slice := func(generation int64, devs ...resourceapi.Device) resourceapi.ResourceSlice {
		return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com",
			Pool: resourceapi.ResourcePool{Name: "node-1", Generation: generation}, Devices: devs}}
	}
	d := func(name string) Device { return Device{"gpu.nvidia.com", "node-1", name} }
	// The pool was republished: generation 2 renamed gpu-1's UUID.
	slices := []resourceapi.ResourceSlice{
		slice(2, dev("gpu-0", "GPU-a"), dev("gpu-1", "GPU-b2")),
		slice(1, dev("gpu-0", "GPU-a"), dev("gpu-1", "GPU-b1")),
		slice(2, dev("gpu-2", "")),
	}
	got, err := UUIDs(slices, []Device{d("gpu-1"), d("gpu-0")})
	if err != nil || len(got) != 2 || got[0] != "GPU-b2" || got[1] != "GPU-a" {
		t.Errorf("UUIDs = %v, %v; want [GPU-b2 GPU-a] from the newest generation, in the devices' order", got, err)
	}
	if _, err := UUIDs(slices, []Device{d("gpu-2")}); err == nil {
		t.Error("a device publishing no uuid gave no error")
	}
}
