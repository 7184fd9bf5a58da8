package mock

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	gomock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

// Backend is an nvml.Backend over a scriptable mock of one machine.
type Backend struct {
	*nvml.Library
	profile Profile
	node    string
	srv     *server.Server

	mu     sync.Mutex
	gpus   []*gpu
	events chan gonvml.EventData
	// countRet is what DeviceGetCount answers when not SUCCESS.
	countRet gonvml.Return
}

var _ nvml.Backend = (*Backend)(nil)

// gpu is the scripted state of one mock GPU.
type gpu struct {
	dev        *server.Device
	uuid       string
	busID      string
	lost       bool
	failures   map[string]gonvml.Return
	remap      nvml.RemappedRows
	fabric     uint8
	fabricRet  gonvml.Return
	telemetry  Telemetry
	migCurrent bool
	migPending bool
	mig        []gonvml.Device
	registered uint64
}

// Telemetry are the gauges a mock GPU reports.
type Telemetry struct {
	// MemoryUsedMiB is framebuffer memory in use.
	MemoryUsedMiB uint64
	// GPUUtilizationPercent and MemoryUtilizationPercent are 0-100.
	GPUUtilizationPercent, MemoryUtilizationPercent uint32
	// TemperatureCelsius is the core temperature.
	TemperatureCelsius uint32
	// PowerMilliwatts is the board power.
	PowerMilliwatts uint32
	// SMClockMHz is the SM clock.
	SMClockMHz uint32
	// ECCUncorrected is the volatile uncorrected ECC error count.
	ECCUncorrected uint64
}

// New returns a mock of a machine of the named profile, for node nodeName
// (UUIDs derive from it). opts.Machine defaults to the profile's.
func New(profile, nodeName string, opts nvml.Options) (*Backend, error) {
	p, ok := Profiles[profile]
	if !ok {
		return nil, fmt.Errorf("unknown mock profile %q: known profiles are %s", profile, strings.Join(ProfileNames(), ", "))
	}
	srv := p.newServer()
	srv.DriverVersion, srv.NvmlVersion, srv.CudaDriverVersion = p.DriverVersion, p.NVMLVersion, p.CUDADriverVersion
	b := &Backend{profile: p, node: nodeName, srv: srv, events: make(chan gonvml.EventData, 64)}
	for i := range p.GPUs() {
		g := &gpu{
			dev:      srv.Devices[i].(*server.Device),
			uuid:     stableUUID("GPU", nodeName, i),
			busID:    p.BusIDs[i],
			failures: map[string]gonvml.Return{},
			remap:    nvml.RemappedRows{Known: true},
			telemetry: Telemetry{
				TemperatureCelsius: uint32(p.IdleTemperatureCelsius),
				PowerMilliwatts:    uint32(p.IdlePowerWatts * 1000),
				SMClockMHz:         p.IdleSMClockMHz,
			},
			fabricRet: gonvml.SUCCESS,
		}
		if p.Fabric {
			g.fabric = gonvml.GPU_FABRIC_STATE_COMPLETED
		}
		b.gpus = append(b.gpus, g)
		b.wireDevice(g, i)
	}
	b.wireServer()
	if opts.Machine == "" {
		opts.Machine = p.Machine
	}
	if opts.NUMANode == nil {
		opts.NUMANode = p.numaNode
	}
	b.Library = nvml.New(srv, opts)
	return b, nil
}

// Profile is the machine the mock plays.
func (b *Backend) Profile() Profile { return b.profile }

// UUID is the stable UUID of GPU index.
func (b *Backend) UUID(index int) string { return b.gpus[index].uuid }

// stableUUID derives a UUID-shaped id from the node name and index.
func stableUUID(prefix, node string, index int, extra ...int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "gpulab-mock/%s/%d/%v", node, index, extra))
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// query answers the scripted result for a field of GPU g.
func (b *Backend) query(g *gpu, field string) gonvml.Return {
	if g.lost {
		return gonvml.ERROR_GPU_IS_LOST
	}
	if ret, ok := g.failures[field]; ok {
		return ret
	}
	return gonvml.SUCCESS
}

func (b *Backend) wireServer() {
	s := b.srv
	s.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) {
		return &gomock.EventSet{
			WaitFunc: b.wait,
			FreeFunc: func() gonvml.Return { return gonvml.SUCCESS },
		}, gonvml.SUCCESS
	}
	getCount := s.DeviceGetCountFunc
	s.DeviceGetCountFunc = func() (int, gonvml.Return) {
		b.mu.Lock()
		ret := b.countRet
		b.mu.Unlock()
		if ret != gonvml.SUCCESS {
			return 0, ret
		}
		return getCount()
	}
	// The server's handle lookup would succeed for a lost GPU; NVML does not.
	getHandle := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i >= 0 && i < len(b.gpus) {
			b.mu.Lock()
			defer b.mu.Unlock()
			if ret := b.query(b.gpus[i], "handle"); ret != gonvml.SUCCESS {
				return nil, ret
			}
		}
		return getHandle(i)
	}
}

// wait is the event set's Wait: the next injected event for a registered GPU,
// or ERROR_TIMEOUT.
func (b *Backend) wait(timeoutMs uint32) (gonvml.EventData, gonvml.Return) {
	timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer timer.Stop()
	for {
		select {
		case e := <-b.events:
			if e.Device == nil {
				return e, gonvml.ERROR_GPU_IS_LOST
			}
			b.mu.Lock()
			registered := b.gpuOf(e.Device).registered
			b.mu.Unlock()
			if registered&e.EventType != 0 {
				return e, gonvml.SUCCESS
			}
		case <-timer.C:
			return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
		}
	}
}

func (b *Backend) gpuOf(d gonvml.Device) *gpu {
	for _, g := range b.gpus {
		if g.dev == d {
			return g
		}
	}
	return &gpu{}
}

// wireDevice sets every method the agent calls on GPU i, each answering the
// scripted state under b.mu.
func (b *Backend) wireDevice(g *gpu, i int) {
	d := g.dev
	p := b.profile
	cfg := d.Config
	total := p.MemoryMiB << 20
	locked := func(field string, f func()) gonvml.Return {
		b.mu.Lock()
		defer b.mu.Unlock()
		ret := b.query(g, field)
		if ret == gonvml.SUCCESS && f != nil {
			f()
		}
		return ret
	}
	d.GetUUIDFunc = func() (string, gonvml.Return) { return g.uuid, locked("uuid", nil) }
	d.GetNameFunc = func() (string, gonvml.Return) { return p.Product, locked("name", nil) }
	d.GetMinorNumberFunc = func() (int, gonvml.Return) { return i, locked("minorNumber", nil) }
	d.GetIndexFunc = func() (int, gonvml.Return) { return i, locked("index", nil) }
	d.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		var m gonvml.Memory
		ret := locked("memory", func() {
			used := g.telemetry.MemoryUsedMiB << 20
			m = gonvml.Memory{Total: total, Used: used, Free: total - used}
		})
		return m, ret
	}
	d.GetCudaComputeCapabilityFunc = func() (int, int, gonvml.Return) {
		return cfg.CudaMajor, cfg.CudaMinor, locked("computeCapability", nil)
	}
	d.GetArchitectureFunc = func() (gonvml.DeviceArchitecture, gonvml.Return) {
		return cfg.Architecture, locked("architecture", nil)
	}
	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		var pci gonvml.PciInfo
		pci.PciDeviceId = p.PCIDeviceID
		_, _ = fmt.Sscanf(g.busID, "%x:%x:%x", &pci.Domain, &pci.Bus, &pci.Device)
		copyCString(pci.BusId[:], g.busID)
		copyCString(pci.BusIdLegacy[:], g.busID[4:])
		return pci, locked("pciInfo", nil)
	}
	d.GetMigModeFunc = func() (int, int, gonvml.Return) {
		var cur, pend int
		ret := locked("migMode", func() { cur, pend = migMode(g.migCurrent), migMode(g.migPending) })
		return cur, pend, ret
	}
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, locked("migDeviceCount", nil) }
	d.GetMigDeviceHandleByIndexFunc = func(j int) (gonvml.Device, gonvml.Return) {
		var m gonvml.Device
		ret := locked("migDevice", func() {
			if j < len(g.mig) {
				m = g.mig[j]
			}
		})
		if ret == gonvml.SUCCESS && m == nil {
			ret = gonvml.ERROR_NOT_FOUND
		}
		return m, ret
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) {
		var r nvml.RemappedRows
		ret := locked("remappedRows", func() { r = g.remap })
		return r.Correctable, r.Uncorrectable, r.Pending, r.Failure, ret
	}
	d.GetGpuFabricInfoFunc = func() (gonvml.GpuFabricInfo, gonvml.Return) {
		var f gonvml.GpuFabricInfo
		ret := locked("fabric", func() { f.State, f.Status = g.fabric, uint32(g.fabricRet) })
		if ret == gonvml.SUCCESS && !p.Fabric {
			ret = gonvml.ERROR_NOT_SUPPORTED
		}
		return f, ret
	}
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		var u gonvml.Utilization
		ret := locked("utilization", func() {
			u = gonvml.Utilization{Gpu: g.telemetry.GPUUtilizationPercent, Memory: g.telemetry.MemoryUtilizationPercent}
		})
		if ret == gonvml.SUCCESS && g.migCurrent {
			ret = gonvml.ERROR_NOT_SUPPORTED // as on real GPUs in MIG mode
		}
		return u, ret
	}
	d.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) {
		var t uint32
		ret := locked("temperature", func() { t = g.telemetry.TemperatureCelsius })
		return t, ret
	}
	d.GetPowerUsageFunc = func() (uint32, gonvml.Return) {
		var w uint32
		ret := locked("power", func() { w = g.telemetry.PowerMilliwatts })
		return w, ret
	}
	d.GetClockInfoFunc = func(c gonvml.ClockType) (uint32, gonvml.Return) {
		var mhz uint32
		ret := locked("clock", func() { mhz = g.telemetry.SMClockMHz })
		if ret == gonvml.SUCCESS && c != gonvml.CLOCK_SM {
			ret = gonvml.ERROR_NOT_SUPPORTED // the agent reads only the SM clock
		}
		return mhz, ret
	}
	d.GetTotalEccErrorsFunc = func(gonvml.MemoryErrorType, gonvml.EccCounterType) (uint64, gonvml.Return) {
		var n uint64
		ret := locked("ecc", func() { n = g.telemetry.ECCUncorrected })
		return n, ret
	}
	d.GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) {
		return gonvml.EventTypeXidCriticalError | gonvml.EventTypeDoubleBitEccError | gonvml.EventTypeSingleBitEccError |
			gonvml.EventTypePState | gonvml.EventTypeClock, locked("eventTypes", nil)
	}
	d.RegisterEventsFunc = func(mask uint64, _ gonvml.EventSet) gonvml.Return {
		return locked("registerEvents", func() { g.registered |= mask })
	}
}

func migMode(on bool) int {
	if on {
		return gonvml.DEVICE_MIG_ENABLE
	}
	return gonvml.DEVICE_MIG_DISABLE
}

func copyCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}
