package local

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUResource is the extended resource the NVIDIA device plugin advertises.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// kwokNodeAnnotation marks a node as one kwok plays the kubelet for.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// Profile is the shape of one kind of real GPU machine: what its node object
// carries once the device plugin and GPU Feature Discovery have run.
type Profile struct {
	// Name is the profile's name on the command line (e.g. dgx-h100).
	Name string
	// Product is the GFD nvidia.com/gpu.product value (NVML name, spaces → '-').
	Product string
	// GPUs is the number of GPUs per node.
	GPUs int
	// MemoryMiB is the memory of one GPU as NVML reports it.
	MemoryMiB int64
	// Family is the GFD nvidia.com/gpu.family value.
	Family string
	// ComputeMajor and ComputeMinor are the CUDA compute capability.
	ComputeMajor, ComputeMinor int
	// Machine is the GFD nvidia.com/gpu.machine value (DMI product name).
	Machine string
	// CPU and Memory are the node's capacity.
	CPU, Memory string
}

// Driver and CUDA versions every fake node reports, as one fleet would after
// a driver rollout.
const (
	driverVersion = "570.172.08"
	cudaVersion   = "12.8"
)

// Profiles are the GPU machines the local testbed can fake.
var Profiles = map[string]Profile{
	"dgx-a100": {Name: "dgx-a100", Product: "NVIDIA-A100-SXM4-40GB", GPUs: 8, MemoryMiB: 40960, Family: "ampere",
		ComputeMajor: 8, ComputeMinor: 0, Machine: "DGXA100-920-23687-2530-000", CPU: "256", Memory: "1031737468Ki"},
	"dgx-h100": {Name: "dgx-h100", Product: "NVIDIA-H100-80GB-HBM3", GPUs: 8, MemoryMiB: 81559, Family: "hopper",
		ComputeMajor: 9, ComputeMinor: 0, Machine: "DGXH100", CPU: "224", Memory: "2113313076Ki"},
	"dgx-h200": {Name: "dgx-h200", Product: "NVIDIA-H200", GPUs: 8, MemoryMiB: 143771, Family: "hopper",
		ComputeMajor: 9, ComputeMinor: 0, Machine: "DGXH200", CPU: "224", Memory: "2113313076Ki"},
	"dgx-b200": {Name: "dgx-b200", Product: "NVIDIA-B200", GPUs: 8, MemoryMiB: 183359, Family: "blackwell",
		ComputeMajor: 10, ComputeMinor: 0, Machine: "DGXB200", CPU: "224", Memory: "4226630920Ki"},
}

// ProfileNames lists the known profiles in order.
func ProfileNames() []string {
	names := make([]string, 0, len(Profiles))
	for n := range Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// FleetEntry is a number of nodes of one profile.
type FleetEntry struct {
	Profile Profile
	Count   int
}

// Fleet is the testbed's fake GPU nodes.
type Fleet []FleetEntry

// DefaultFleet is four DGX H100 nodes (32 GPUs).
const DefaultFleet = "dgx-h100=4"

// MaxNodesPerProfile bounds a fleet entry: room for `make bench-scale`'s
// 1,000 gangs (1.25 nodes each), not so many that a typo fills the disk.
const MaxNodesPerProfile = 2000

// ParseFleet reads "dgx-h100=4,dgx-a100=4" into a Fleet.
func ParseFleet(spec string) (Fleet, error) {
	var fleet Fleet
	seen := map[string]bool{}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, countStr, ok := strings.Cut(part, "=")
		if !ok {
			countStr = "1"
		}
		p, known := Profiles[name]
		if !known {
			return nil, fmt.Errorf("unknown GPU node profile %q in %q: known profiles are %s", name, spec, strings.Join(ProfileNames(), ", "))
		}
		if seen[name] {
			return nil, fmt.Errorf("profile %q appears twice in %q", name, spec)
		}
		seen[name] = true
		count, err := strconv.Atoi(countStr)
		if err != nil || count < 1 || count > MaxNodesPerProfile {
			return nil, fmt.Errorf("node count %q for profile %q must be a whole number from 1 to %d", countStr, name, MaxNodesPerProfile)
		}
		fleet = append(fleet, FleetEntry{Profile: p, Count: count})
	}
	if len(fleet) == 0 {
		return nil, fmt.Errorf("fleet %q names no nodes: use e.g. %q", spec, DefaultFleet)
	}
	return fleet, nil
}

// String renders the fleet back in ParseFleet's syntax.
func (f Fleet) String() string {
	parts := make([]string, 0, len(f))
	for _, e := range f {
		parts = append(parts, fmt.Sprintf("%s=%d", e.Profile.Name, e.Count))
	}
	return strings.Join(parts, ",")
}

// GPUs is the fleet's total GPU count.
func (f Fleet) GPUs() int {
	total := 0
	for _, e := range f {
		total += e.Count * e.Profile.GPUs
	}
	return total
}

// Nodes renders the fleet's Node objects, named <profile>-<index>.
func (f Fleet) Nodes() []*corev1.Node {
	var nodes []*corev1.Node
	for _, e := range f {
		for i := range e.Count {
			nodes = append(nodes, e.Profile.Node(fmt.Sprintf("%s-%d", e.Profile.Name, i)))
		}
	}
	return nodes
}

// Labels are the labels a node of this profile carries: the well-known
// Kubernetes ones and GPU Feature Discovery's.
func (p Profile) Labels(nodeName string) map[string]string {
	driver := strings.Split(driverVersion, ".")
	cuda := strings.Split(cudaVersion, ".")
	return map[string]string{
		"kubernetes.io/hostname":                  nodeName,
		"kubernetes.io/os":                        "linux",
		"kubernetes.io/arch":                      "amd64",
		"type":                                    "kwok",
		"gpulab.io/testbed-profile":               p.Name,
		"nvidia.com/gpu.present":                  "true",
		"nvidia.com/gpu.product":                  p.Product,
		"nvidia.com/gpu.count":                    strconv.Itoa(p.GPUs),
		"nvidia.com/gpu.memory":                   strconv.FormatInt(p.MemoryMiB, 10),
		"nvidia.com/gpu.family":                   p.Family,
		"nvidia.com/gpu.compute.major":            strconv.Itoa(p.ComputeMajor),
		"nvidia.com/gpu.compute.minor":            strconv.Itoa(p.ComputeMinor),
		"nvidia.com/gpu.machine":                  p.Machine,
		"nvidia.com/gpu.replicas":                 "1",
		"nvidia.com/gpu.sharing-strategy":         "none",
		"nvidia.com/mig.capable":                  "true",
		"nvidia.com/mig.strategy":                 "none",
		"nvidia.com/cuda.driver-version.major":    driver[0],
		"nvidia.com/cuda.driver-version.minor":    driver[1],
		"nvidia.com/cuda.driver-version.revision": driver[2],
		"nvidia.com/cuda.driver-version.full":     driverVersion,
		"nvidia.com/cuda.runtime-version.major":   cuda[0],
		"nvidia.com/cuda.runtime-version.minor":   cuda[1],
		"nvidia.com/cuda.runtime-version.full":    cudaVersion,
	}
}

// Node renders a kwok-managed Node of this profile with the capacity and
// allocatable a kubelet plus the device plugin would report.
func (p Profile) Node(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(p.CPU),
		corev1.ResourceMemory:           resource.MustParse(p.Memory),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("3750Gi"),
		GPUResource:                     *resource.NewQuantity(int64(p.GPUs), resource.DecimalSI),
	}
	// Allocatable keeps the system reservations a real node subtracts.
	allocatable := capacity.DeepCopy()
	cpu := allocatable[corev1.ResourceCPU]
	cpu.Sub(resource.MustParse("2"))
	allocatable[corev1.ResourceCPU] = cpu
	mem := allocatable[corev1.ResourceMemory]
	mem.Sub(resource.MustParse("16Gi"))
	allocatable[corev1.ResourceMemory] = mem

	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      p.Labels(name),
			Annotations: map[string]string{kwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:            "amd64",
				OperatingSystem:         "linux",
				KubeletVersion:          "fake",
				ContainerRuntimeVersion: "fake://kwok",
				OSImage:                 p.Machine,
			},
		},
	}
}
