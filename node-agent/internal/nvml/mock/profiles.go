package mock

import (
	"sort"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Profile is one kind of real GPU machine as NVML sees it.
type Profile struct {
	// Name is the profile's name (e.g. dgx-h100), as the testbed's
	// gpulab.io/testbed-profile label spells it.
	Name string
	// Machine is the DMI product name.
	Machine string
	// Product is the GPU name NVML reports.
	Product string
	// MemoryMiB is the framebuffer size NVML reports (not the marketing size).
	MemoryMiB uint64
	// PCIDeviceID is the combined device and vendor id.
	PCIDeviceID uint32
	// BusIDs are the GPUs' PCI bus ids in NVML index order; their count is
	// the GPU count.
	BusIDs []string
	// Fabric says whether NVML reports an NVLink fabric state (Hopper and
	// later NVSwitch systems; A100 answers NOT_SUPPORTED).
	Fabric bool
	// IdlePowerWatts and IdleTemperatureCelsius are an idle GPU's readings.
	IdlePowerWatts, IdleTemperatureCelsius float64
	// IdleSMClockMHz is an idle GPU's SM clock.
	IdleSMClockMHz uint32
	// DriverVersion, NVMLVersion and CUDADriverVersion (NVML encoding, 12080
	// = 12.8) are the driver the node runs.
	DriverVersion, NVMLVersion string
	CUDADriverVersion          int
	// newServer builds go-nvml's mock server for the machine.
	newServer func() *server.Server
}

// GPUs is the number of GPUs in the machine.
func (p Profile) GPUs() int { return len(p.BusIDs) }

// numaNode is the NUMA node of the GPU at busID: every DGX of these
// generations is a two-socket machine with the first half of its GPUs on
// node 0 and the second half on node 1.
func (p Profile) numaNode(busID string) int {
	for i, b := range p.BusIDs {
		if b == busID {
			return i * 2 / len(p.BusIDs)
		}
	}
	return -1
}

// One driver for every profile, as on a fleet after a driver rollout; the
// testbed's fake nodes report the same.
const (
	driverVersion     = "570.172.08"
	nvmlVersion       = "12.570.172.08"
	cudaDriverVersion = 12080
)

// Bus ids of the eight SXM GPUs in each DGX generation, as nvidia-smi lists
// them. B200 reuses the H100 layout.
var (
	dgxA100BusIDs = []string{"00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0",
		"00000000:87:00.0", "00000000:90:00.0", "00000000:B7:00.0", "00000000:BD:00.0"}
	dgxH100BusIDs = []string{"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
		"00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"}
)

// Profiles are the machines the mock can play. The values are those real
// machines report; go-nvml's mock servers differ in places (e.g. they name the
// H200 "NVIDIA H200 141GB HBM3e" with 144384 MiB and PCI id 0x233310DE).
var Profiles = map[string]Profile{
	"dgx-a100": {
		Name: "dgx-a100", Machine: "DGXA100-920-23687-2530-000",
		Product: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, PCIDeviceID: 0x20B010DE,
		BusIDs: dgxA100BusIDs, Fabric: false, IdlePowerWatts: 56.3, IdleTemperatureCelsius: 31, IdleSMClockMHz: 210,
		newServer: dgxa100.New,
	},
	"dgx-h100": {
		Name: "dgx-h100", Machine: "DGXH100",
		Product: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, PCIDeviceID: 0x233010DE,
		BusIDs: dgxH100BusIDs, Fabric: true, IdlePowerWatts: 71.8, IdleTemperatureCelsius: 33, IdleSMClockMHz: 345,
		newServer: dgxh100.New,
	},
	"dgx-h200": {
		Name: "dgx-h200", Machine: "DGXH200",
		Product: "NVIDIA H200", MemoryMiB: 143771, PCIDeviceID: 0x233510DE,
		BusIDs: dgxH100BusIDs, Fabric: true, IdlePowerWatts: 76.4, IdleTemperatureCelsius: 32, IdleSMClockMHz: 345,
		newServer: dgxh200.New,
	},
	"dgx-b200": {
		Name: "dgx-b200", Machine: "DGXB200",
		Product: "NVIDIA B200", MemoryMiB: 183359, PCIDeviceID: 0x290110DE,
		BusIDs: dgxH100BusIDs, Fabric: true, IdlePowerWatts: 141.2, IdleTemperatureCelsius: 35, IdleSMClockMHz: 120,
		newServer: dgxb200.New,
	},
}

func init() {
	for name, p := range Profiles {
		p.DriverVersion, p.NVMLVersion, p.CUDADriverVersion = driverVersion, nvmlVersion, cudaDriverVersion
		Profiles[name] = p
	}
}

// ProfileNames lists the profiles in order.
func ProfileNames() []string {
	names := make([]string, 0, len(Profiles))
	for n := range Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fabricStates maps the API's fabric state names to NVML's.
var fabricStates = map[string]uint8{
	"NotSupported": gonvml.GPU_FABRIC_STATE_NOT_SUPPORTED,
	"NotStarted":   gonvml.GPU_FABRIC_STATE_NOT_STARTED,
	"InProgress":   gonvml.GPU_FABRIC_STATE_IN_PROGRESS,
	"Completed":    gonvml.GPU_FABRIC_STATE_COMPLETED,
}
