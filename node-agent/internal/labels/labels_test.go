package labels_test

import (
	"reflect"
	"testing"

	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/node-agent/internal/labels"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

func TestProductValue(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":       "NVIDIA-H100-80GB-HBM3",
		"NVIDIA A100-SXM4-40GB":       "NVIDIA-A100-SXM4-40GB",
		"NVIDIA H200":                 "NVIDIA-H200",
		"NVIDIA GeForce RTX 4090 (x)": "NVIDIA-GeForce-RTX-4090--x",
		"":                            "",
	} {
		if got := labels.ProductValue(in); got != want {
			t.Errorf("ProductValue(%q) = %q, want %q", in, got, want)
		}
	}
	long := labels.ProductValue("NVIDIA " + string(make([]byte, 100)))
	if len(long) > 63 {
		t.Errorf("value longer than 63: %q", long)
	}
}

func TestFamily(t *testing.T) {
	for _, tc := range []struct {
		major, minor int
		want         string
	}{{7, 0, "volta"}, {7, 5, "turing"}, {8, 0, "ampere"}, {8, 6, "ampere"}, {8, 9, "ada-lovelace"}, {9, 0, "hopper"}, {10, 0, "blackwell"}, {12, 0, "blackwell"}, {4, 0, "undefined"}} {
		if got := labels.FamilyOf(tc.major, tc.minor); got != tc.want {
			t.Errorf("FamilyOf(%d.%d) = %q, want %q", tc.major, tc.minor, got, tc.want)
		}
	}
}

func TestForNode(t *testing.T) {
	if got := labels.ForNode(&nvml.Snapshot{DriverVersion: "570.172.08"}); len(got) != 0 {
		t.Errorf("a node without GPUs gets no labels, got %v", got)
	}
	s := &nvml.Snapshot{
		DriverVersion: "550.54", CUDADriverMajor: 12, CUDADriverMinor: 4, Machine: "PowerEdge XE9680",
		Devices: []nvml.Device{
			{Name: "NVIDIA L40S", MemoryTotalBytes: 46068 << 20, ComputeMajor: 8, ComputeMinor: 9},
			{Name: "NVIDIA L40S", MemoryTotalBytes: 46068 << 20, ComputeMajor: 8, ComputeMinor: 9},
		},
	}
	want := map[string]string{
		gfd.Product: "NVIDIA-L40S", gfd.Count: "2", gfd.Memory: "46068", gfd.Family: "ada-lovelace",
		gfd.ComputeMajor: "8", gfd.ComputeMinor: "9", gfd.Machine: "PowerEdge-XE9680",
		gfd.DriverVersionMajor: "550", gfd.DriverVersionMinor: "54", gfd.DriverVersionRev: "", gfd.DriverVersionFull: "550.54",
		gfd.RuntimeVersionMajor: "12", gfd.RuntimeVersionMinor: "4", gfd.RuntimeVersionFull: "12.4",
		gfd.MIGCapable: "false",
	}
	if got := labels.ForNode(s); !reflect.DeepEqual(got, want) {
		t.Errorf("ForNode:\n got %v\nwant %v", got, want)
	}
}
