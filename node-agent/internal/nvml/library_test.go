package nvml_test

import (
	"context"
	"errors"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

// TestRealWithoutDriver runs the real backend on a machine without an NVIDIA
// driver (the CI and development machines): Init must fail cleanly, and no
// other call may reach NVML, since that would abort the process.
func TestRealWithoutDriver(t *testing.T) {
	b := nvml.NewReal(nvml.Options{})
	if _, err := b.Snapshot(); !errors.Is(err, nvml.ErrNotInitialized) {
		t.Fatalf("Snapshot before Init: got %v, want ErrNotInitialized", err)
	}
	err := b.Init()
	if err == nil {
		t.Skip("this machine has an NVIDIA driver; the no-driver path cannot be exercised here")
	}
	if !errors.Is(err, nvml.ErrNoDriver) {
		t.Fatalf("Init: got %v, want ErrNoDriver", err)
	}
	if _, err := b.Snapshot(); !errors.Is(err, nvml.ErrNotInitialized) {
		t.Fatalf("Snapshot after a failed Init: got %v, want ErrNotInitialized", err)
	}
	if err := b.Watch(context.Background(), make(chan nvml.Event)); !errors.Is(err, nvml.ErrNotInitialized) {
		t.Fatalf("Watch after a failed Init: got %v, want ErrNotInitialized", err)
	}
	if err := b.Shutdown(); err != nil {
		t.Fatalf("Shutdown after a failed Init: %v", err)
	}
	// Init may be retried (the driver container may come up later).
	if err := b.Init(); !errors.Is(err, nvml.ErrNoDriver) {
		t.Fatalf("second Init: got %v, want ErrNoDriver", err)
	}
}

func TestMIGProfileName(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		gi, ci   uint32
		memMiB   uint64
		totalMiB uint64
		want     string
	}{
		{1, 1, 4864, 40960, "1g.5gb"},      // A100 40GB
		{3, 3, 19968, 40960, "3g.20gb"},    // A100 40GB
		{7, 7, 40192, 40960, "7g.40gb"},    // A100 40GB
		{1, 1, 9856, 81559, "1g.10gb"},     // H100 80GB
		{2, 1, 19968, 81559, "1c.2g.20gb"}, // compute instance smaller than its GPU instance
		{1, 1, 16384, 143771, "1g.18gb"},   // H200
	} {
		a := gonvml.DeviceAttributes{GpuInstanceSliceCount: tc.gi, ComputeInstanceSliceCount: tc.ci, MemorySizeMB: tc.memMiB}
		if got := nvml.MIGProfileName(a, tc.totalMiB*mib); got != tc.want {
			t.Errorf("MIGProfileName(%dg/%dc, %d MiB of %d MiB) = %q, want %q", tc.gi, tc.ci, tc.memMiB, tc.totalMiB, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	if got := nvml.ArchitectureName(gonvml.DEVICE_ARCH_HOPPER); got != "hopper" {
		t.Errorf("hopper: got %q", got)
	}
	if got := nvml.ArchitectureName(gonvml.DEVICE_ARCH_ADA); got != "ada-lovelace" {
		t.Errorf("ada: got %q", got)
	}
	if got := nvml.FabricStateName(gonvml.GPU_FABRIC_STATE_IN_PROGRESS); got != nvml.FabricInProgress {
		t.Errorf("in progress: got %q", got)
	}
	f := nvml.Fabric{State: nvml.FabricCompleted, Status: "ERROR_UNKNOWN"}
	if f.Complete() {
		t.Error("a completed fabric with a failed registration must not count as complete")
	}
}
