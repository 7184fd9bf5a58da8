package local

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseFleet(t *testing.T) {
	tests := []struct {
		spec    string
		want    string // Fleet.String(); empty when an error is expected
		gpus    int
		wantErr string
	}{
		{spec: "dgx-h100=4", want: "dgx-h100=4", gpus: 32},
		{spec: "dgx-h100=4, dgx-a100=4", want: "dgx-h100=4,dgx-a100=4", gpus: 64},
		{spec: "dgx-h200", want: "dgx-h200=1", gpus: 8},
		{spec: "dgx-v100=2", wantErr: `unknown GPU node profile "dgx-v100"`},
		{spec: "dgx-h100=0", wantErr: "must be a whole number from 1 to 2000"},
		{spec: "dgx-h100=-3", wantErr: "must be a whole number from 1 to 2000"},
		{spec: "dgx-h100=two", wantErr: "must be a whole number from 1 to 2000"},
		{spec: "dgx-h100=2001", wantErr: "must be a whole number from 1 to 2000"},
		{spec: "dgx-h100=1,dgx-h100=2", wantErr: "appears twice"},
		{spec: " , ", wantErr: "names no nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			fleet, err := ParseFleet(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFleet(%q) error = %v, want one containing %q", tc.spec, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFleet(%q): %v", tc.spec, err)
			}
			if got := fleet.String(); got != tc.want {
				t.Errorf("fleet %q, want %q", got, tc.want)
			}
			if got := fleet.GPUs(); got != tc.gpus {
				t.Errorf("fleet has %d GPUs, want %d", got, tc.gpus)
			}
		})
	}
}

// TestProfilesMatchRealMachines pins the values a real node of each kind
// reports, as GPU Feature Discovery and the device plugin publish them.
func TestProfilesMatchRealMachines(t *testing.T) {
	tests := []struct {
		profile, product, memory, family, major string
	}{
		{"dgx-a100", "NVIDIA-A100-SXM4-40GB", "40960", "ampere", "8"},
		{"dgx-h100", "NVIDIA-H100-80GB-HBM3", "81559", "hopper", "9"},
		{"dgx-h200", "NVIDIA-H200", "143771", "hopper", "9"},
		{"dgx-b200", "NVIDIA-B200", "183359", "blackwell", "10"},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			node := Profiles[tc.profile].Node("n0")
			want := map[string]string{
				"nvidia.com/gpu.product":       tc.product,
				"nvidia.com/gpu.count":         "8",
				"nvidia.com/gpu.memory":        tc.memory,
				"nvidia.com/gpu.family":        tc.family,
				"nvidia.com/gpu.compute.major": tc.major,
				"kubernetes.io/hostname":       "n0",
			}
			for k, v := range want {
				if got := node.Labels[k]; got != v {
					t.Errorf("label %s = %q, want %q", k, got, v)
				}
			}
			if node.Annotations[kwokNodeAnnotation] != "fake" {
				t.Errorf("node lacks the kwok annotation, so kwok would not manage it")
			}
			for name, list := range map[string]corev1.ResourceList{"capacity": node.Status.Capacity, "allocatable": node.Status.Allocatable} {
				if gpus := list[GPUResource]; gpus.Value() != 8 {
					t.Errorf("%s nvidia.com/gpu = %s, want 8", name, gpus.String())
				}
			}
			capCPU, allocCPU := node.Status.Capacity[corev1.ResourceCPU], node.Status.Allocatable[corev1.ResourceCPU]
			if allocCPU.Cmp(capCPU) >= 0 {
				t.Errorf("allocatable cpu %s should be below capacity %s (system reservations)", allocCPU.String(), capCPU.String())
			}
		})
	}
}
