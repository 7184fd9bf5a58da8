package draclass

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// class is the agent's DeviceClass (node-agent/dra.DeviceClass).
func class(t testing.TB) *Class {
	t.Helper()
	c, err := Compile(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.gpulab.io"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "device.driver == 'gpu.gpulab.io' && device.attributes['gpu.gpulab.io'].type == 'gpu'"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fleet is nodes node-local pools of 8 GPUs each, of driver.
func fleet(nodes int, driver string, generation int64) []resourceapi.ResourceSlice {
	var out []resourceapi.ResourceSlice
	for n := range nodes {
		node := fmt.Sprintf("node-%d", n)
		s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: 1}}}
		for i := range 8 {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}}})
		}
		out = append(out, s)
	}
	return out
}

// Only the class's driver counts, and only a pool's newest generation.
func TestPools(t *testing.T) {
	slices := append(fleet(2, "gpu.gpulab.io", 2), fleet(3, "gpu.nvidia.com", 1)...)
	stale := fleet(1, "gpu.gpulab.io", 1)[0]
	stale.Spec.Devices = append(stale.Spec.Devices, resourceapi.Device{Name: "gpu-8",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}}})
	slices = append(slices, stale)
	pools, err := class(t).Pools(context.Background(), slices)
	if err != nil {
		t.Fatal(err)
	}
	if got := PerNode(pools); len(got) != 2 || got["node-0"] != 8 || got["node-1"] != 8 {
		t.Errorf("devices per node %v, want 8 on node-0 and node-1 (the newer generation), none of the other driver", got)
	}
}

// BenchmarkPools: what the operator's capacity view pays per rebuild for
// one class on the local testbed's largest fleet (1,250 nodes of 8 GPUs).
func BenchmarkPools(b *testing.B) {
	c, slices := class(b), fleet(1250, "gpu.gpulab.io", 1)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Pools(ctx, slices); err != nil {
			b.Fatal(err)
		}
	}
}
