package mock

import (
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	gomock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

func (b *Backend) gpu(index int) (*gpu, error) {
	if index < 0 || index >= len(b.gpus) {
		return nil, fmt.Errorf("mock %s has no GPU %d (it has %d)", b.profile.Name, index, len(b.gpus))
	}
	return b.gpus[index], nil
}

func (b *Backend) set(index int, f func(g *gpu)) error {
	g, err := b.gpu(index)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f(g)
	return nil
}

// InjectXID delivers an XID critical error for GPU index through the event
// set, as the driver would.
func (b *Backend) InjectXID(index int, xid uint64) error {
	return b.inject(index, gonvml.EventTypeXidCriticalError, xid)
}

// InjectECC delivers a double-bit (uncorrectable) or single-bit ECC event.
func (b *Backend) InjectECC(index int, doubleBit bool) error {
	t := uint64(gonvml.EventTypeSingleBitEccError)
	if doubleBit {
		t = gonvml.EventTypeDoubleBitEccError
	}
	return b.inject(index, t, 0)
}

func (b *Backend) inject(index int, eventType, data uint64) error {
	g, err := b.gpu(index)
	if err != nil {
		return err
	}
	b.events <- gonvml.EventData{Device: g.dev, EventType: eventType, EventData: data,
		GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
	return nil
}

// SetLost makes every query on GPU index answer GPU_IS_LOST, and wakes the
// event set with GPU_IS_LOST as the driver does when a GPU falls off the bus.
func (b *Backend) SetLost(index int) error {
	if err := b.set(index, func(g *gpu) { g.lost = true }); err != nil {
		return err
	}
	b.events <- gonvml.EventData{}
	return nil
}

// FailQuery makes one query on GPU index answer ret (SUCCESS clears it).
// Fields: handle, uuid, name, minorNumber, memory, computeCapability,
// architecture, pciInfo, migMode, migDeviceCount, migDevice, remappedRows,
// fabric, utilization, temperature, power, clock, ecc, eventTypes, registerEvents.
func (b *Backend) FailQuery(index int, field string, ret gonvml.Return) error {
	return b.set(index, func(g *gpu) {
		if ret == gonvml.SUCCESS {
			delete(g.failures, field)
		} else {
			g.failures[field] = ret
		}
	})
}

// FailDeviceCount makes DeviceGetCount answer ret, so that every scan fails
// as a whole (SUCCESS clears it).
func (b *Backend) FailDeviceCount(ret gonvml.Return) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.countRet = ret
}

// SetRemappedRows sets GPU index's row-remapping state.
func (b *Backend) SetRemappedRows(index int, r nvml.RemappedRows) error {
	r.Known = true
	return b.set(index, func(g *gpu) { g.remap = r })
}

// SetFabric sets GPU index's fabric state (NotStarted, InProgress, Completed,
// NotSupported) and registration result.
func (b *Backend) SetFabric(index int, state string, status gonvml.Return) error {
	s, ok := fabricStates[state]
	if !ok {
		return fmt.Errorf("unknown fabric state %q", state)
	}
	return b.set(index, func(g *gpu) { g.fabric, g.fabricRet = s, status })
}

// SetTelemetry sets GPU index's gauges.
func (b *Backend) SetTelemetry(index int, t Telemetry) error {
	return b.set(index, func(g *gpu) { g.telemetry = t })
}

// MIGInstance is a MIG device to carve out of a mock GPU.
type MIGInstance struct {
	// GPUSlices and ComputeSlices are the GPU and compute instance sizes.
	GPUSlices, ComputeSlices uint32
	// MemoryMiB is the instance memory.
	MemoryMiB uint64
}

// SetMIG enables (with the given devices) or disables MIG on GPU index; the
// current and pending modes both follow.
func (b *Backend) SetMIG(index int, enabled bool, devices ...MIGInstance) error {
	return b.set(index, func(g *gpu) {
		g.migCurrent, g.migPending, g.mig = enabled, enabled, nil
		if !enabled {
			return
		}
		for j, m := range devices {
			uuid := stableUUID("MIG", b.node, index, j)
			attrs := gonvml.DeviceAttributes{GpuInstanceSliceCount: m.GPUSlices, ComputeInstanceSliceCount: m.ComputeSlices, MemorySizeMB: m.MemoryMiB}
			g.mig = append(g.mig, &gomock.Device{
				GetUUIDFunc:       func() (string, gonvml.Return) { return uuid, gonvml.SUCCESS },
				GetAttributesFunc: func() (gonvml.DeviceAttributes, gonvml.Return) { return attrs, gonvml.SUCCESS },
			})
		}
	})
}

// SetPendingMIG sets the MIG mode GPU index takes after its next reset.
func (b *Backend) SetPendingMIG(index int, enabled bool) error {
	return b.set(index, func(g *gpu) { g.migPending = enabled })
}
