package nvml

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Options configures a Library.
type Options struct {
	// EventWaitTimeout bounds each NVML event wait so that Watch notices
	// cancellation. Defaults to 1s.
	EventWaitTimeout time.Duration
	// MachineTypeFile holds the host's DMI product name, reported as
	// Snapshot.Machine. Defaults to /sys/class/dmi/id/product_name; "-"
	// disables reading it.
	MachineTypeFile string
	// Machine, when set, is reported as Snapshot.Machine instead of reading
	// MachineTypeFile (mock backends use it).
	Machine string
	// NUMANode answers the NUMA node of the GPU at a PCI bus id, -1 when
	// unknown. Defaults to reading /sys/bus/pci/devices/<bus id>/numa_node,
	// as the NVIDIA device plugin does (NVML has no call for it on every
	// driver the agent supports).
	NUMANode func(pciBusID string) int
}

// SysfsNUMANode reads a PCI device's NUMA node from sysfs; -1 when it is
// unknown (no such file, or the kernel says -1 on single-node machines).
func SysfsNUMANode(pciBusID string) int { return numaNodeIn("/sys/bus/pci/devices", pciBusID) }

// numaNodeIn reads the NUMA node of a PCI device under dir, a sysfs
// devices directory.
func numaNodeIn(dir, pciBusID string) int {
	// NVML's bus id has an 8-digit domain (00000000:18:00.0); sysfs a
	// 4-digit one, in lower case.
	id := strings.ToLower(pciBusID)
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	b, err := os.ReadFile(filepath.Join(dir, id, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// DefaultMachineTypeFile is where Linux exposes the DMI product name.
const DefaultMachineTypeFile = "/sys/class/dmi/id/product_name"

// Functions that drivers older than the agent's minimum may lack. Calling a
// missing one aborts the process, so each is looked up after Init.
const (
	symArchitecture = "nvmlDeviceGetArchitecture"
	symMIGMode      = "nvmlDeviceGetMigMode"
	symMIGDevices   = "nvmlDeviceGetMigDeviceHandleByIndex"
	symAttributes   = "nvmlDeviceGetAttributes"
	symRemappedRows = "nvmlDeviceGetRemappedRows"
	symFabric       = "nvmlDeviceGetGpuFabricInfo"
)

var optionalSymbols = []string{symArchitecture, symMIGMode, symMIGDevices, symAttributes, symRemappedRows, symFabric}

// Library is a Backend over any go-nvml Interface.
type Library struct {
	lib  gonvml.Interface
	opts Options

	// mu is held for reading around every NVML call and for writing by Init
	// and Shutdown, so no call can race an unload.
	mu      sync.RWMutex
	ready   bool
	symbols map[string]bool
}

var _ Backend = (*Library)(nil)

// New returns a Backend over lib.
func New(lib gonvml.Interface, opts Options) *Library {
	if opts.EventWaitTimeout <= 0 {
		opts.EventWaitTimeout = time.Second
	}
	if opts.MachineTypeFile == "" {
		opts.MachineTypeFile = DefaultMachineTypeFile
	}
	if opts.NUMANode == nil {
		opts.NUMANode = SysfsNUMANode
	}
	return &Library{lib: lib, opts: opts}
}

// NewReal returns a Backend over the node's libnvidia-ml.so.1.
func NewReal(opts Options) *Library { return New(gonvml.New(), opts) }

// Init implements Backend.
func (l *Library) Init() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ready {
		return nil
	}
	switch ret := l.lib.Init(); ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: libnvidia-ml.so.1 could not be loaded (is the driver installed and, in a container, injected by the NVIDIA container toolkit?)", ErrNoDriver)
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: libnvidia-ml.so.1 is present but the kernel driver is not loaded", ErrNoDriver)
	default:
		return fmt.Errorf("initialising NVML: %w", ret)
	}
	l.ready = true
	l.symbols = make(map[string]bool, len(optionalSymbols))
	ext := l.lib.Extensions()
	for _, s := range optionalSymbols {
		l.symbols[s] = ext.LookupSymbol(s) == nil
	}
	return nil
}

// Shutdown implements Backend.
func (l *Library) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ready {
		return nil
	}
	l.ready = false
	if ret := l.lib.Shutdown(); ret != gonvml.SUCCESS {
		return fmt.Errorf("shutting NVML down: %w", ret)
	}
	return nil
}

func (l *Library) has(symbol string) bool { return l.symbols[symbol] }

// Snapshot implements Backend.
func (l *Library) Snapshot() (*Snapshot, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.ready {
		return nil, ErrNotInitialized
	}
	s := &Snapshot{Machine: l.machine()}
	if v, ret := l.lib.SystemGetDriverVersion(); ret == gonvml.SUCCESS {
		s.DriverVersion = v
	} else {
		s.Errors = append(s.Errors, "driverVersion: "+ret.Error())
	}
	if v, ret := l.lib.SystemGetCudaDriverVersion(); ret == gonvml.SUCCESS {
		// NVML encodes 12.8 as 12080.
		s.CUDADriverMajor, s.CUDADriverMinor = v/1000, (v%1000)/10
	} else {
		s.Errors = append(s.Errors, "cudaDriverVersion: "+ret.Error())
	}
	if v, ret := l.lib.SystemGetNVMLVersion(); ret == gonvml.SUCCESS {
		s.NVMLVersion = v
	} else {
		s.Errors = append(s.Errors, "nvmlVersion: "+ret.Error())
	}
	count, ret := l.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %w", ret)
	}
	s.Devices = make([]Device, count)
	for i := range count {
		s.Devices[i] = l.readDevice(i)
	}
	return s, nil
}

func (l *Library) machine() string {
	if l.opts.Machine != "" || l.opts.MachineTypeFile == "-" {
		return l.opts.Machine
	}
	b, err := os.ReadFile(l.opts.MachineTypeFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ok records a failed query on d and reports whether ret is SUCCESS.
// NOT_SUPPORTED is an answer, not an error, so it is not recorded.
func (d *Device) ok(field string, ret gonvml.Return) bool {
	switch ret {
	case gonvml.SUCCESS:
		return true
	case gonvml.ERROR_NOT_SUPPORTED:
		return false
	case gonvml.ERROR_GPU_IS_LOST:
		if d.Lost {
			return false
		}
		d.Lost = true
	}
	d.Errors = append(d.Errors, field+": "+ret.Error())
	return false
}

func (l *Library) readDevice(i int) Device {
	d := Device{Index: i, Minor: -1, NUMANode: -1}
	h, ret := l.lib.DeviceGetHandleByIndex(i)
	if !d.ok("handle", ret) {
		return d
	}
	l.readIdentity(h, &d)
	if d.Lost {
		return d
	}
	if d.PCIBusID != "" {
		d.NUMANode = l.opts.NUMANode(d.PCIBusID)
	}
	l.readMIG(h, &d)
	l.readHealth(h, &d)
	readTelemetry(h, &d)
	return d
}

func (l *Library) readIdentity(h gonvml.Device, d *Device) {
	if v, ret := h.GetUUID(); d.ok("uuid", ret) {
		d.UUID = v
	}
	if v, ret := h.GetName(); d.ok("name", ret) {
		d.Name = v
	}
	if v, ret := h.GetMinorNumber(); d.ok("minorNumber", ret) {
		d.Minor = v
	}
	if m, ret := h.GetMemoryInfo(); d.ok("memory", ret) {
		d.MemoryTotalBytes = m.Total
		d.Telemetry.MemoryUsedBytes = reading(float64(m.Used))
		d.Telemetry.MemoryFreeBytes = reading(float64(m.Free))
	}
	if major, minor, ret := h.GetCudaComputeCapability(); d.ok("computeCapability", ret) {
		d.ComputeMajor, d.ComputeMinor = major, minor
	}
	if l.has(symArchitecture) {
		if a, ret := h.GetArchitecture(); d.ok("architecture", ret) {
			d.Architecture = ArchitectureName(a)
		}
	}
	if p, ret := h.GetPciInfo(); d.ok("pciInfo", ret) {
		d.PCIBusID = cString(p.BusId[:])
		d.PCIDeviceID = p.PciDeviceId
	}
}

func (l *Library) readMIG(h gonvml.Device, d *Device) {
	if !l.has(symMIGMode) {
		return
	}
	current, pending, ret := h.GetMigMode()
	if !d.ok("migMode", ret) {
		return
	}
	d.MIG = &MIG{Current: current == gonvml.DEVICE_MIG_ENABLE, Pending: pending == gonvml.DEVICE_MIG_ENABLE}
	if !d.MIG.Current || !l.has(symMIGDevices) {
		return
	}
	n, ret := h.GetMaxMigDeviceCount()
	if !d.ok("migDeviceCount", ret) {
		return
	}
	for j := range n {
		m, ret := h.GetMigDeviceHandleByIndex(j)
		if ret == gonvml.ERROR_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
			continue // no MIG device in this slot
		}
		field := "migDevice[" + strconv.Itoa(j) + "]"
		if !d.ok(field, ret) {
			continue
		}
		md := MIGDevice{Index: j}
		if v, ret := m.GetUUID(); d.ok(field+".uuid", ret) {
			md.UUID = v
		}
		if l.has(symAttributes) {
			if a, ret := m.GetAttributes(); d.ok(field+".attributes", ret) {
				md.MemoryMiB = int64(a.MemorySizeMB)
				md.Profile = MIGProfileName(a, d.MemoryTotalBytes)
			}
		}
		d.MIG.Devices = append(d.MIG.Devices, md)
	}
}

func (l *Library) readHealth(h gonvml.Device, d *Device) {
	if l.has(symRemappedRows) {
		if c, u, pending, failure, ret := h.GetRemappedRows(); d.ok("remappedRows", ret) {
			d.RemappedRows = RemappedRows{Known: true, Correctable: c, Uncorrectable: u, Pending: pending, Failure: failure}
		}
	}
	if l.has(symFabric) {
		if f, ret := h.GetGpuFabricInfo(); d.ok("fabric", ret) {
			d.Fabric = &Fabric{State: FabricStateName(f.State)}
			if d.Fabric.State == FabricCompleted {
				if st := gonvml.Return(f.Status); st == gonvml.SUCCESS {
					d.Fabric.Status = "Success"
				} else {
					d.Fabric.Status = st.Error()
				}
			}
		}
	}
}

// readTelemetry reads the gauges. Their failures leave the reading unset and
// are not recorded as errors: telemetry is not part of the inventory, and a
// flapping sensor must not rewrite it.
func readTelemetry(h gonvml.Device, d *Device) {
	t := &d.Telemetry
	lost := func(ret gonvml.Return) {
		if ret == gonvml.ERROR_GPU_IS_LOST {
			d.ok("telemetry", ret)
		}
	}
	if u, ret := h.GetUtilizationRates(); ret == gonvml.SUCCESS {
		t.GPUUtilization = reading(float64(u.Gpu) / 100)
		t.MemoryUtilization = reading(float64(u.Memory) / 100)
	} else {
		lost(ret)
	}
	if v, ret := h.GetTemperature(gonvml.TEMPERATURE_GPU); ret == gonvml.SUCCESS {
		t.TemperatureCelsius = reading(float64(v))
	} else {
		lost(ret)
	}
	if v, ret := h.GetPowerUsage(); ret == gonvml.SUCCESS {
		t.PowerWatts = reading(float64(v) / 1000)
	} else {
		lost(ret)
	}
	if v, ret := h.GetClockInfo(gonvml.CLOCK_SM); ret == gonvml.SUCCESS {
		t.SMClockMHz = reading(float64(v))
	} else {
		lost(ret)
	}
	if v, ret := h.GetTotalEccErrors(gonvml.MEMORY_ERROR_TYPE_UNCORRECTED, gonvml.VOLATILE_ECC); ret == gonvml.SUCCESS {
		t.ECCUncorrectedVolatile = reading(float64(v))
	} else {
		lost(ret)
	}
}

// watchedEvents are the event types the agent registers for, as the device
// plugin does.
const watchedEvents = gonvml.EventTypeXidCriticalError | gonvml.EventTypeDoubleBitEccError | gonvml.EventTypeSingleBitEccError

// Watch implements Backend.
func (l *Library) Watch(ctx context.Context, events chan<- Event) error {
	set, lost, err := l.register()
	if err != nil {
		return err
	}
	defer l.free(set)
	send := func(e Event) bool {
		select {
		case events <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for _, uuid := range lost {
		if !send(Event{UUID: uuid, Kind: EventGPULost, Time: time.Now()}) {
			return nil
		}
	}
	timeout := uint32(l.opts.EventWaitTimeout / time.Millisecond)
	for ctx.Err() == nil {
		e, ok, err := l.wait(set, timeout)
		if err != nil {
			return err
		}
		if ok && !send(e) {
			return nil
		}
	}
	return nil
}

// register creates an event set and registers every GPU on it. GPUs that are
// lost while registering are returned so that they are reported.
func (l *Library) register() (gonvml.EventSet, []string, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.ready {
		return nil, nil, ErrNotInitialized
	}
	set, ret := l.lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		return nil, nil, fmt.Errorf("creating NVML event set: %w", ret)
	}
	count, ret := l.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		_ = set.Free()
		return nil, nil, fmt.Errorf("counting GPUs: %w", ret)
	}
	var lost []string
	for i := range count {
		h, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue // the scan reports it
		}
		uuid, _ := h.GetUUID()
		supported, ret := h.GetSupportedEventTypes()
		if ret == gonvml.SUCCESS {
			if mask := supported & watchedEvents; mask != 0 {
				ret = h.RegisterEvents(mask, set)
			}
		}
		if ret == gonvml.ERROR_GPU_IS_LOST {
			lost = append(lost, uuid)
		}
	}
	return set, lost, nil
}

func (l *Library) free(set gonvml.EventSet) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.ready {
		_ = set.Free()
	}
}

// wait waits for one event. It answers ok=false when there is nothing to
// report (timeout, or an event type the agent does not watch).
func (l *Library) wait(set gonvml.EventSet, timeoutMs uint32) (Event, bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.ready {
		return Event{}, false, ErrNotInitialized
	}
	data, ret := set.Wait(timeoutMs)
	now := time.Now()
	switch ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_TIMEOUT:
		return Event{}, false, nil
	case gonvml.ERROR_GPU_IS_LOST:
		// NVML does not say which GPU; the next scan finds out.
		return Event{Kind: EventGPULost, Time: now}, true, nil
	default:
		return Event{}, false, fmt.Errorf("waiting for NVML events: %w", ret)
	}
	e := Event{Time: now}
	if data.Device != nil {
		if uuid, ret := data.Device.GetUUID(); ret == gonvml.SUCCESS {
			e.UUID = uuid
		}
	}
	switch data.EventType {
	case gonvml.EventTypeXidCriticalError:
		e.Kind, e.XID = EventXID, data.EventData
	case gonvml.EventTypeDoubleBitEccError:
		e.Kind = EventDoubleBitECC
	case gonvml.EventTypeSingleBitEccError:
		e.Kind = EventSingleBitECC
	default:
		return Event{}, false, nil
	}
	return e, true, nil
}

// ArchitectureName names an NVML architecture as GFD names GPU families.
func ArchitectureName(a gonvml.DeviceArchitecture) string {
	switch a {
	case gonvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case gonvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case gonvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case gonvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case gonvml.DEVICE_ARCH_TURING:
		return "turing"
	case gonvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case gonvml.DEVICE_ARCH_ADA:
		return "ada-lovelace"
	case gonvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case gonvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	case gonvml.DEVICE_ARCH_RUBIN:
		return "rubin"
	}
	return "unknown"
}

// FabricStateName names an NVML fabric state as the GPUInventory API does.
func FabricStateName(s uint8) string {
	switch s {
	case gonvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		return FabricNotSupported
	case gonvml.GPU_FABRIC_STATE_NOT_STARTED:
		return FabricNotStarted
	case gonvml.GPU_FABRIC_STATE_IN_PROGRESS:
		return FabricInProgress
	case gonvml.GPU_FABRIC_STATE_COMPLETED:
		return FabricCompleted
	}
	return "Unknown"
}

// MIGProfileName names a MIG device's profile the way nvidia-smi does:
// <gi>g.<mem>gb, prefixed by <ci>c. when the compute instance is smaller than
// its GPU instance. The memory is the instance's share of the GPU rounded up
// to eighths, times the GPU's memory in whole GiB.
func MIGProfileName(a gonvml.DeviceAttributes, totalBytes uint64) string {
	gb := uint64(0)
	if totalBytes > 0 {
		const gib = 1 << 30
		share := float64(a.MemorySizeMB<<20) / float64(totalBytes)
		share = math.Ceil(share*8) / 8
		gb = uint64(math.Round(share * float64((totalBytes+gib-1)/gib)))
	}
	name := fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, gb)
	if a.ComputeInstanceSliceCount != a.GpuInstanceSliceCount {
		name = fmt.Sprintf("%dc.%s", a.ComputeInstanceSliceCount, name)
	}
	return name
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func itoa(i int) string { return strconv.Itoa(i) }
