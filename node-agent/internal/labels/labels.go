package labels

import (
	"strconv"
	"strings"

	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

// Prefix is the domain of every label the agent writes.
const Prefix = "nvidia.com/"

// GFD label keys.
const (
	Product             = "nvidia.com/gpu.product"
	Count               = "nvidia.com/gpu.count"
	Memory              = "nvidia.com/gpu.memory"
	Family              = "nvidia.com/gpu.family"
	ComputeMajor        = "nvidia.com/gpu.compute.major"
	ComputeMinor        = "nvidia.com/gpu.compute.minor"
	Machine             = "nvidia.com/gpu.machine"
	DriverVersionMajor  = "nvidia.com/cuda.driver-version.major"
	DriverVersionMinor  = "nvidia.com/cuda.driver-version.minor"
	DriverVersionRev    = "nvidia.com/cuda.driver-version.revision"
	DriverVersionFull   = "nvidia.com/cuda.driver-version.full"
	RuntimeVersionMajor = "nvidia.com/cuda.runtime-version.major"
	RuntimeVersionMinor = "nvidia.com/cuda.runtime-version.minor"
	RuntimeVersionFull  = "nvidia.com/cuda.runtime-version.full"
	MIGCapable          = "nvidia.com/mig.capable"
)

// ForNode renders the labels for a node's snapshot. Like GFD, per-GPU values
// come from the first GPU, and a node without GPUs gets no labels.
func ForNode(s *nvml.Snapshot) map[string]string {
	if s == nil || len(s.Devices) == 0 {
		return map[string]string{}
	}
	d := s.Devices[0]
	l := map[string]string{Count: strconv.Itoa(len(s.Devices))}
	if v := ProductValue(d.Name); v != "" {
		l[Product] = v
	}
	if d.MemoryTotalBytes > 0 {
		l[Memory] = strconv.FormatInt(d.MemoryMiB(), 10)
	}
	if d.ComputeMajor > 0 {
		l[Family] = FamilyOf(d.ComputeMajor, d.ComputeMinor)
		l[ComputeMajor] = strconv.Itoa(d.ComputeMajor)
		l[ComputeMinor] = strconv.Itoa(d.ComputeMinor)
	}
	if v := Sanitize(s.Machine); v != "" {
		l[Machine] = v
	}
	if parts := strings.Split(s.DriverVersion, "."); len(parts) == 2 || len(parts) == 3 {
		l[DriverVersionMajor], l[DriverVersionMinor] = parts[0], parts[1]
		l[DriverVersionRev] = ""
		if len(parts) == 3 {
			l[DriverVersionRev] = parts[2]
		}
		l[DriverVersionFull] = s.DriverVersion
	}
	if s.CUDADriverMajor > 0 {
		l[RuntimeVersionMajor] = strconv.Itoa(s.CUDADriverMajor)
		l[RuntimeVersionMinor] = strconv.Itoa(s.CUDADriverMinor)
		l[RuntimeVersionFull] = s.CUDADriverVersion()
	}
	capable := false
	for i := range s.Devices {
		capable = capable || s.Devices[i].MIG != nil
	}
	l[MIGCapable] = strconv.FormatBool(capable)
	return l
}

// ProductValue is GFD's product label value for an NVML device name: spaces
// become dashes (NVIDIA H100 80GB HBM3 → NVIDIA-H100-80GB-HBM3).
func ProductValue(name string) string { return Sanitize(name) }

// Sanitize makes s a valid label value the way GFD does for product and
// machine names: spaces become dashes, then any other character a label value
// cannot hold becomes a dash, the value is cut to 63 characters and trimmed to
// start and end with an alphanumeric.
func Sanitize(s string) string {
	b := []byte(strings.TrimSpace(s))
	for i, c := range b {
		if !alnum(rune(c)) && c != '-' && c != '_' && c != '.' {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.TrimFunc(string(b), func(r rune) bool { return !alnum(r) })
}

func alnum(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }

// FamilyOf is GFD's gpu.family for a compute capability.
func FamilyOf(major, minor int) string {
	switch major {
	case 1:
		return "tesla"
	case 2:
		return "fermi"
	case 3:
		return "kepler"
	case 5:
		return "maxwell"
	case 6:
		return "pascal"
	case 7:
		if minor < 5 {
			return "volta"
		}
		return "turing"
	case 8:
		if minor == 9 {
			return "ada-lovelace"
		}
		return "ampere"
	case 9:
		return "hopper"
	case 10, 12:
		return "blackwell"
	}
	return "undefined"
}
