package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// TestGPUInventoryBounds: the operator sizes gangs from inventories, so the
// API server rejects counts below zero and more healthy GPUs than GPUs.
func TestGPUInventoryBounds(t *testing.T) {
	c := needEnv(t)
	valid := func(name string) *v1.GPUInventory {
		return &v1.GPUInventory{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: v1.GPUInventoryStatus{
				Summary: v1.InventorySummary{Count: 2, Healthy: 1, Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559},
				GPUs: []v1.GPUDevice{
					{Index: 0, UUID: "GPU-0", MemoryMiB: 81559, Health: v1.GPUHealth{State: v1.GPUHealthy}},
					{Index: 1, UUID: "GPU-1", MemoryMiB: 81559, Health: v1.GPUHealth{State: v1.GPUUnhealthy}},
				},
			},
		}
	}
	const negative = " in body should be greater than or equal to 0"
	tests := []struct {
		name    string
		mutate  func(*v1.GPUInventory)
		message string // empty: must be accepted
	}{
		{"valid", func(*v1.GPUInventory) {}, ""},
		{"all healthy", func(i *v1.GPUInventory) { i.Status.Summary.Healthy = 2 }, ""},
		{"empty node", func(i *v1.GPUInventory) { i.Status.Summary = v1.InventorySummary{}; i.Status.GPUs = nil }, ""},
		{"more healthy than GPUs", func(i *v1.GPUInventory) { i.Status.Summary.Healthy = 3 },
			"summary.healthy must not exceed summary.count"},
		{"negative count", func(i *v1.GPUInventory) { i.Status.Summary.Count, i.Status.Summary.Healthy = -1, 0 },
			"status.summary.count" + negative},
		{"negative healthy", func(i *v1.GPUInventory) { i.Status.Summary.Healthy = -1 },
			"status.summary.healthy" + negative},
		{"negative summary memory", func(i *v1.GPUInventory) { i.Status.Summary.MemoryMiB = -1 },
			"status.summary.memoryMiB" + negative},
		{"negative GPU memory", func(i *v1.GPUInventory) { i.Status.GPUs[1].MemoryMiB = -1 },
			"status.gpus[1].memoryMiB" + negative},
		{"negative index", func(i *v1.GPUInventory) { i.Status.GPUs[1].Index = -1 },
			"status.gpus[1].index" + negative},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := valid("inventory-bounds-" + string(rune('a'+i)))
			tc.mutate(obj)
			expectCreate(t, c, obj, tc.message)
		})
	}
}
