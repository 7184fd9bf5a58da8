package nvml

import (
	"context"
	"errors"
	"time"
)

// ErrNoDriver means NVML cannot run on this node: libnvidia-ml.so.1 could not
// be loaded (no NVIDIA driver, or the container runtime did not inject it), or
// the library is present but the kernel driver is not loaded.
var ErrNoDriver = errors.New("no NVIDIA driver")

// ErrNotInitialized is returned by calls made before a successful Init; it
// exists so that no NVML symbol is ever called on an unloaded library.
var ErrNotInitialized = errors.New("NVML is not initialized")

// Backend is one source of GPU facts.
type Backend interface {
	// Init loads and initialises NVML. It wraps ErrNoDriver when the node has
	// no usable driver. It may be retried after a failure.
	Init() error
	// Shutdown releases NVML; calls after it fail with ErrNotInitialized.
	Shutdown() error
	// Snapshot reads the system and every GPU.
	Snapshot() (*Snapshot, error)
	// Watch sends health events to events until ctx is done. It returns nil
	// on cancellation and an error if the event set cannot be set up.
	Watch(ctx context.Context, events chan<- Event) error
}

// Snapshot is one read of a node's GPUs.
type Snapshot struct {
	// DriverVersion is the kernel driver version (e.g. 570.172.08).
	DriverVersion string
	// CUDADriverMajor and CUDADriverMinor are the CUDA version the driver
	// supports (e.g. 12 and 8).
	CUDADriverMajor, CUDADriverMinor int
	// NVMLVersion is the NVML library version.
	NVMLVersion string
	// Machine is the DMI product name of the host, empty when unknown.
	Machine string
	// Devices are the GPUs in NVML index order.
	Devices []Device
	// Errors are system-level queries that failed (field: error).
	Errors []string
}

// CUDADriverVersion renders the CUDA driver version as major.minor, or "" if
// it is unknown.
func (s *Snapshot) CUDADriverVersion() string {
	if s.CUDADriverMajor == 0 {
		return ""
	}
	return itoa(s.CUDADriverMajor) + "." + itoa(s.CUDADriverMinor)
}

// Device is one physical GPU.
type Device struct {
	// Index is NVML's device index.
	Index int
	// Minor is the /dev/nvidiaN minor number, -1 when unknown.
	Minor int
	// UUID is the GPU UUID (GPU-...).
	UUID string
	// Name is the product name as NVML reports it.
	Name string
	// MemoryTotalBytes is the framebuffer size.
	MemoryTotalBytes uint64
	// ComputeMajor and ComputeMinor are the CUDA compute capability; zero
	// when unknown.
	ComputeMajor, ComputeMinor int
	// Architecture is the lower-case architecture name (e.g. hopper).
	Architecture string
	// PCIBusID is the PCI bus id (e.g. 00000000:18:00.0).
	PCIBusID string
	// PCIDeviceID is the combined device and vendor id (e.g. 0x233010DE).
	PCIDeviceID uint32
	// NUMANode is the NUMA node the GPU is attached to, -1 when unknown or
	// the machine has a single node.
	NUMANode int
	// MIG is nil when the GPU cannot do MIG.
	MIG *MIG
	// Fabric is nil where NVML has no fabric state for the GPU.
	Fabric *Fabric
	// Lost is true once any query answered GPU_IS_LOST.
	Lost bool
	// RemappedRows is the row-remapping state (A100 and later).
	RemappedRows RemappedRows
	// Telemetry holds the gauges exported as metrics.
	Telemetry Telemetry
	// Errors are queries that failed for this GPU (field: error).
	Errors []string
}

// MemoryMiB is the framebuffer size in MiB, as nvidia-smi and GFD report it.
func (d *Device) MemoryMiB() int64 { return int64(d.MemoryTotalBytes / (1 << 20)) }

// MIG is a GPU's MIG mode and devices.
type MIG struct {
	// Current and Pending are the MIG mode now and after the next reset.
	Current, Pending bool
	// Devices are the MIG devices, when Current is true.
	Devices []MIGDevice
}

// MIGDevice is one MIG device.
type MIGDevice struct {
	// Index is the MIG device index within its parent.
	Index int
	// UUID is the MIG device UUID (MIG-...).
	UUID string
	// Profile is the profile name (e.g. 1g.10gb, or 1c.2g.20gb when the
	// compute instance is smaller than its GPU instance).
	Profile string
	// MemoryMiB is the instance's memory.
	MemoryMiB int64
}

// Fabric is the NVLink fabric registration state of a GPU on an NVSwitch
// system.
type Fabric struct {
	// State is NotSupported, NotStarted, InProgress or Completed.
	State string
	// Status is the registration result: Success or an NVML error name.
	Status string
}

// Complete reports whether the GPU finished fabric registration successfully.
func (f *Fabric) Complete() bool {
	return f.State == FabricNotSupported || (f.State == FabricCompleted && f.Status == "Success")
}

// Fabric states, as in the GPUInventory API.
const (
	FabricNotSupported = "NotSupported"
	FabricNotStarted   = "NotStarted"
	FabricInProgress   = "InProgress"
	FabricCompleted    = "Completed"
)

// RemappedRows is the row-remapping state of HBM.
type RemappedRows struct {
	// Known is false when the GPU or driver does not report it.
	Known bool
	// Correctable and Uncorrectable count rows remapped for each kind of error.
	Correctable, Uncorrectable int
	// Pending means a remap waits for a GPU reset.
	Pending bool
	// Failure means a remap failed: the GPU must be taken out of service.
	Failure bool
}

// Reading is an optional gauge value.
type Reading struct {
	Value float64
	OK    bool
}

func reading(v float64) Reading { return Reading{Value: v, OK: true} }

// Telemetry are point-in-time gauges in base units.
type Telemetry struct {
	// MemoryUsedBytes and MemoryFreeBytes are framebuffer memory in use and
	// free.
	MemoryUsedBytes, MemoryFreeBytes Reading
	// GPUUtilization and MemoryUtilization are ratios (0-1) over the last
	// sample period; NVML does not report them for GPUs in MIG mode.
	GPUUtilization, MemoryUtilization Reading
	// TemperatureCelsius is the GPU core temperature.
	TemperatureCelsius Reading
	// PowerWatts is the board power draw.
	PowerWatts Reading
	// SMClockMHz is the current SM clock.
	SMClockMHz Reading
	// ECCUncorrectedVolatile counts uncorrected ECC errors since the driver
	// loaded.
	ECCUncorrectedVolatile Reading
}

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventXID is an XID critical error; Event.XID holds its number.
	EventXID EventKind = iota + 1
	// EventDoubleBitECC is an uncorrectable (double-bit) ECC error.
	EventDoubleBitECC
	// EventSingleBitECC is a corrected (single-bit) ECC error.
	EventSingleBitECC
	// EventGPULost means NVML answered GPU_IS_LOST while waiting for events.
	EventGPULost
)

func (k EventKind) String() string {
	switch k {
	case EventXID:
		return "XID"
	case EventDoubleBitECC:
		return "DoubleBitECC"
	case EventSingleBitECC:
		return "SingleBitECC"
	case EventGPULost:
		return "GPULost"
	}
	return "Unknown"
}

// Event is one health event.
type Event struct {
	// UUID is the GPU the event is about; empty means every GPU.
	UUID string
	// Kind is what happened.
	Kind EventKind
	// XID is the XID number for EventXID.
	XID uint64
	// Time is when the agent received the event.
	Time time.Time
}
