package dra

import (
	"testing"

	"github.com/gpulab/gpulab/api/v1alpha1"
)

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{"9.0": "9.0.0", "12.8": "12.8.0", "570.172.08": "570.172.8", "580": "580.0.0", "": "", "1.2.3.4": "", "12.x": ""} {
		got, ok := semver(in)
		if got != want || ok != (want != "") {
			t.Errorf("semver(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// Only Healthy GPUs that have a UUID are offered, with NVIDIA's attribute
// forms.
func TestDevices(t *testing.T) {
	healthy := v1alpha1.GPUHealth{State: v1alpha1.GPUHealthy}
	st := &v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08", CUDADriverVersion: "12.8", GPUs: []v1alpha1.GPUDevice{
		{Index: 0, UUID: "GPU-a", Product: "NVIDIA H200", MemoryMiB: 143771, ComputeCapability: "9.0", Architecture: "hopper",
			PCIBusID: "00000000:18:00.0", Health: healthy},
		{Index: 1, UUID: "GPU-b", Health: v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy}},
		{Index: 2, Health: healthy},
		{Index: 3, UUID: "GPU-d", Health: healthy},
	}}
	devs := Devices(st)
	if len(devs) != 2 || devs[0].Name != "gpu-0" || devs[1].Name != "gpu-3" {
		t.Fatalf("devices %+v, want gpu-0 and gpu-3", devs)
	}
	a := devs[0].Attributes
	if *a["driverVersion"].VersionValue != "570.172.8" || *a["cudaDriverVersion"].VersionValue != "12.8.0" ||
		*a["resource.kubernetes.io/pciBusID"].StringValue != "0000:18:00.0" || *a["architecture"].StringValue != "Hopper" {
		t.Errorf("attributes %+v", a)
	}
	if m := devs[0].Capacity["memory"].Value; m.Value() != 143771<<20 {
		t.Errorf("memory %s", m.String())
	}
	if _, ok := devs[1].Attributes["cudaComputeCapability"]; ok {
		t.Error("an unknown compute capability was published")
	}
	if len(Devices(nil)) != 0 {
		t.Error("no inventory offered devices")
	}
}
