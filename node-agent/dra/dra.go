// Package dra publishes a node's GPUs for Dynamic Resource Allocation
// (resource.k8s.io/v1): one pool per node, named after it, in
// ResourceSlices of the driver DefaultDriverName, kept in step with the
// agent's scans by k8s.io/dynamic-resource-allocation's resourceslice
// controller. A GPU that is not Healthy leaves the slice, so the scheduler
// never allocates it.
//
// Devices are described as NVIDIA's DRA driver (gpu.nvidia.com) describes
// full GPUs: type "gpu", uuid, productName, brand, architecture,
// cudaComputeCapability, driverVersion and cudaDriverVersion (semantic
// versions), resource.kubernetes.io/pciBusID and capacity memory (bytes),
// so a claim's CEL written for one reads the other once the domain is
// changed. They are named gpu-<NVML index> (NVIDIA's driver uses the
// minor number, equal to the index on most machines and on the mocks) and
// also carry index, which NVIDIA's driver published until v25.8.
package dra

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/draclass"
)

// DefaultDriverName is gpulab's DRA driver (internal/draclass says why
// its name is its own).
const DefaultDriverName = draclass.DriverName

// Devices are the Healthy GPUs of a node's inventory as DRA devices, in
// index order (the allocator fills the first that fit). A GPU without a
// UUID (lost before it was identified) is not offered.
func Devices(st *v1alpha1.GPUInventoryStatus) []resourceapi.Device {
	devs := []resourceapi.Device{}
	if st == nil {
		return devs
	}
	for _, g := range st.GPUs {
		if g.UUID == "" || g.Health.State != v1alpha1.GPUHealthy {
			continue
		}
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":         {StringValue: ptr.To("gpu")},
			"uuid":         {StringValue: ptr.To(g.UUID)},
			"productName":  {StringValue: ptr.To(g.Product)},
			"brand":        {StringValue: ptr.To("Nvidia")},
			"architecture": {StringValue: ptr.To(titled(g.Architecture))},
			"index":        {IntValue: ptr.To(int64(g.Index))},
		}
		if bdf := pciBusID(g.PCIBusID); bdf != "" {
			attrs["resource.kubernetes.io/pciBusID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(bdf)}
		}
		for name, v := range map[resourceapi.QualifiedName]string{
			"cudaComputeCapability": g.ComputeCapability,
			"driverVersion":         st.DriverVersion,
			"cudaDriverVersion":     st.CUDADriverVersion,
		} {
			if s, ok := semver(v); ok {
				attrs[name] = resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
			}
		}
		devs = append(devs, resourceapi.Device{
			Name:       deviceName(g),
			Attributes: attrs,
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(g.MemoryMiB<<20, resource.BinarySI)},
			},
		})
	}
	return devs
}

// pciBusID is NVML's bus id (00000000:18:00.0) in the form of the
// standard attribute resource.kubernetes.io/pciBusID: lower case, a
// four-digit domain (0000:18:00.0).
func pciBusID(id string) string {
	id = strings.ToLower(id)
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) == 8 && strings.HasPrefix(dom, "0000") {
		return dom[4:] + ":" + rest
	}
	return id
}

// titled is an architecture as NVIDIA's driver writes it (Hopper), from
// the inventory's lower-case name (hopper).
func titled(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// semver renders a dotted version (9.0, 12.8, 570.172.08) as the semantic
// version a DRA version attribute must be: three parts, no leading zeros
// (9.0.0, 12.8.0, 570.172.8). false for what is not numbers and dots.
func semver(v string) (string, bool) {
	parts := strings.Split(v, ".")
	if v == "" || len(parts) > 3 {
		return "", false
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return "", false
		}
		parts[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, "."), true
}

// Resources is a node's pool: one slice with its devices, the pool named
// after the node (a pool with no devices still says the driver runs).
func Resources(node string, st *v1alpha1.GPUInventoryStatus) *resourceslice.DriverResources {
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		node: {Slices: []resourceslice.Slice{{Devices: Devices(st)}}},
	}}
}

// Publisher keeps one node's pool published.
type Publisher struct {
	node string
	mu   sync.Mutex
	ctrl *resourceslice.Controller
	// last is the newest Update, applied once ctrl has started.
	last    *v1alpha1.GPUInventoryStatus
	stopped bool
}

// Start publishes node's pool, empty until the first Update, in slices
// owned by the Node (the garbage collector removes them with it) until
// ctx is done or Stop. The controller starts in the background: its start
// waits for its first list of slices, and a simulator starting hundreds of
// nodes must not wait for each in turn. Updates made meanwhile are kept
// and the last one published once it runs; a start that fails is logged
// and retried by nothing (the agent restarts).
func Start(ctx context.Context, kube kubernetes.Interface, driver, node string, log logr.Logger) *Publisher {
	p := &Publisher{node: node}
	go func() {
		ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
			DriverName: driver,
			KubeClient: kube,
			Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: node},
			Resources:  Resources(node, nil),
		})
		if err != nil {
			log.Error(err, "cannot publish the node's DRA devices", "node", node, "driver", driver)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stopped {
			ctrl.Stop()
			return
		}
		p.ctrl = ctrl
		if p.last != nil {
			ctrl.Update(Resources(node, p.last))
		}
	}()
	return p
}

// Update publishes the devices of a scan's inventory.
func (p *Publisher) Update(st *v1alpha1.GPUInventoryStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = st
	if p.ctrl != nil {
		p.ctrl.Update(Resources(p.node, st))
	}
}

// Stop stops publishing; the slices stay until their Node goes.
func (p *Publisher) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.ctrl != nil {
		p.ctrl.Stop()
	}
}

// DeviceClass selects every full GPU of driver, as NVIDIA's gpu.nvidia.com
// class selects its own: claims ask for it by the driver's name.
func DeviceClass(driver string) *resourceapi.DeviceClass { return draclass.GPUClass(driver) }
