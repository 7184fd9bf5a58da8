package labels

import (
	"strconv"
	"strings"

	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

// ForNode renders the labels for a node's snapshot. Like GFD, per-GPU values
// come from the first GPU, and a node without GPUs gets no labels.
func ForNode(s *nvml.Snapshot) map[string]string {
	if s == nil || len(s.Devices) == 0 {
		return map[string]string{}
	}
	d := s.Devices[0]
	l := map[string]string{gfd.Count: strconv.Itoa(len(s.Devices))}
	if v := ProductValue(d.Name); v != "" {
		l[gfd.Product] = v
	}
	if d.MemoryTotalBytes > 0 {
		l[gfd.Memory] = strconv.FormatInt(d.MemoryMiB(), 10)
	}
	if d.ComputeMajor > 0 {
		l[gfd.Family] = FamilyOf(d.ComputeMajor, d.ComputeMinor)
		l[gfd.ComputeMajor] = strconv.Itoa(d.ComputeMajor)
		l[gfd.ComputeMinor] = strconv.Itoa(d.ComputeMinor)
	}
	if v := Sanitize(s.Machine); v != "" {
		l[gfd.Machine] = v
	}
	if parts := strings.Split(s.DriverVersion, "."); len(parts) == 2 || len(parts) == 3 {
		l[gfd.DriverVersionMajor], l[gfd.DriverVersionMinor] = parts[0], parts[1]
		l[gfd.DriverVersionRev] = ""
		if len(parts) == 3 {
			l[gfd.DriverVersionRev] = parts[2]
		}
		l[gfd.DriverVersionFull] = s.DriverVersion
	}
	if s.CUDADriverMajor > 0 {
		l[gfd.RuntimeVersionMajor] = strconv.Itoa(s.CUDADriverMajor)
		l[gfd.RuntimeVersionMinor] = strconv.Itoa(s.CUDADriverMinor)
		l[gfd.RuntimeVersionFull] = s.CUDADriverVersion()
	}
	capable := false
	for i := range s.Devices {
		capable = capable || s.Devices[i].MIG != nil
	}
	l[gfd.MIGCapable] = strconv.FormatBool(capable)
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
