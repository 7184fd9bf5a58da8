package inventory_test

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/inventory"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

func snapshot(names ...string) *nvml.Snapshot {
	s := &nvml.Snapshot{DriverVersion: "570.172.08", CUDADriverMajor: 12, CUDADriverMinor: 8, NVMLVersion: "12.570.172.08"}
	for i, n := range names {
		s.Devices = append(s.Devices, nvml.Device{Index: i, UUID: "GPU-" + n + string(rune('a'+i)), Name: n,
			MemoryTotalBytes: uint64(80000+i) << 20, ComputeMajor: 9, Architecture: "hopper", PCIBusID: "00000000:18:00.0",
			MIG: &nvml.MIG{}})
	}
	return s
}

func healthy(n int) []v1alpha1.GPUHealth {
	h := make([]v1alpha1.GPUHealth, n)
	for i := range h {
		h[i].State = v1alpha1.GPUHealthy
	}
	return h
}

func TestStatusKeepsTimesUntilSomethingChanges(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := snapshot("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")
	first := inventory.Status(inventory.Input{Snapshot: s, Health: healthy(2), Now: t0})
	if first.Summary != (v1alpha1.InventorySummary{Count: 2, Healthy: 2, Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 80000}) {
		t.Errorf("summary: %+v", first.Summary)
	}
	if g := first.GPUs[1]; g.ComputeCapability != "9.0" || g.MIG.Current != "Disabled" || !g.MIG.Capable || g.Health.Since.Time != t0 {
		t.Errorf("GPU 1: %+v", g)
	}
	second := inventory.Status(inventory.Input{Snapshot: s, Health: healthy(2), Previous: &first, Now: t0.Add(time.Minute)})
	if !equality.Semantic.DeepEqual(first, second) {
		t.Errorf("a rescan of an unchanged node must produce the same status:\n%+v\n%+v", first, second)
	}

	h := healthy(2)
	h[1] = v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: "XidCriticalError"}
	t2 := t0.Add(2 * time.Minute)
	third := inventory.Status(inventory.Input{Snapshot: s, Health: h, Previous: &second, Now: t2})
	if third.GPUs[0].Health.Since.Time != t0 || third.GPUs[1].Health.Since.Time != t2 || third.Summary.Healthy != 1 {
		t.Errorf("only GPU 1 changed: %+v", third)
	}
	if c := third.Conditions[0]; c.Status != metav1.ConditionTrue || c.LastTransitionTime.Time != t0 || c.Message != "2 GPUs, 1 healthy" {
		t.Errorf("Ready: %+v", c)
	}

	failed := inventory.Status(inventory.Input{ScanError: errors.New("boom"), Previous: &third, Now: t2.Add(time.Minute)})
	if len(failed.GPUs) != 2 || failed.Conditions[0].Status != metav1.ConditionFalse || failed.Conditions[0].Reason != v1alpha1.ReasonScanFailed ||
		failed.Conditions[0].LastTransitionTime.Time != t2.Add(time.Minute) {
		t.Errorf("failed scan must keep the GPUs and turn Ready False: %+v", failed)
	}
}

func TestStatusMixedAndEmpty(t *testing.T) {
	st := inventory.Status(inventory.Input{Snapshot: snapshot("NVIDIA H100 80GB HBM3", "NVIDIA H200"), Health: healthy(2), Now: time.Now()})
	if st.Summary.Product != inventory.MixedProduct {
		t.Errorf("product of a mixed node: %q", st.Summary.Product)
	}
	empty := inventory.Status(inventory.Input{NoDriver: "no NVIDIA driver", Now: time.Now()})
	if len(empty.GPUs) != 0 || empty.Summary.Count != 0 || empty.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("empty: %+v", empty)
	}
}
