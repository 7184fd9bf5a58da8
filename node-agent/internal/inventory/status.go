package inventory

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/labels"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

// MixedProduct is the summary product of a node whose GPUs differ.
const MixedProduct = "mixed"

// ReasonScansFailing is the Ready condition's reason once
// Input.UnhealthyAfter scans in a row failed, and the health reason of every
// GPU that was Healthy before: a node whose scans keep failing counts no GPU
// healthy (the operator reads status.summary.healthy).
const ReasonScansFailing = "ScansFailing"

// Input is what one scan observed.
type Input struct {
	// Snapshot is the scan's result; nil when the scan failed or the node
	// has no driver.
	Snapshot *nvml.Snapshot
	// Health is the health of each device in Snapshot.Devices, by position.
	Health []v1alpha1.GPUHealth
	// ScanError is why the scan failed; the previous GPUs are kept and Ready
	// turns False.
	ScanError error
	// NoDriver, when not empty, says why the node is published without GPUs
	// (the agent runs with --allow-no-gpu on a node without a driver).
	NoDriver string
	// Previous is the status last published, or nil. Its times are kept
	// where nothing changed.
	Previous *v1alpha1.GPUInventoryStatus
	// FailedScans counts the scans in a row that failed, this one included.
	FailedScans int
	// UnhealthyAfter is how many scans in a row may fail before no GPU
	// counts as healthy (see ScansFailing); 0 never.
	UnhealthyAfter int
	// Now stamps what changed.
	Now time.Time
}

// ScansFailing reports whether so many scans in a row failed that the
// previous GPUs no longer count as healthy: a GPU that fails to scan is not
// known to be healthy.
func (in Input) ScansFailing() bool {
	return in.ScanError != nil && in.UnhealthyAfter > 0 && in.FailedScans >= in.UnhealthyAfter
}

// Status builds the GPUInventory status for in.
func Status(in Input) v1alpha1.GPUInventoryStatus {
	var st v1alpha1.GPUInventoryStatus
	var prevConds []metav1.Condition
	if in.Previous != nil {
		prevConds = in.Previous.Conditions
	}
	now := metav1.NewTime(in.Now.Truncate(time.Second))
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, LastTransitionTime: now}
	switch {
	case in.ScanError != nil:
		if in.Previous != nil {
			st = *in.Previous.DeepCopy()
		}
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonScanFailed
		ready.Message = "NVML scan failed: " + in.ScanError.Error()
		if in.ScansFailing() {
			// The count stays out of the messages, so that each further
			// failure writes nothing new.
			why := fmt.Sprintf("%d or more NVML scans in a row failed", in.UnhealthyAfter)
			unknown(st.GPUs, why)
			keepSince(st.GPUs, in.Previous, now)
			st.Summary = summarize(st.GPUs)
			ready.Reason = ReasonScansFailing
			ready.Message = why + ": no GPU counts as healthy until a scan succeeds; the last: " + in.ScanError.Error()
		}
	case in.Snapshot == nil:
		ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ReasonScanSucceeded
		ready.Message = "no GPUs published: " + in.NoDriver
	default:
		s := in.Snapshot
		st.DriverVersion, st.CUDADriverVersion, st.NVMLVersion = s.DriverVersion, s.CUDADriverVersion(), s.NVMLVersion
		st.GPUs = make([]v1alpha1.GPUDevice, len(s.Devices))
		for i := range s.Devices {
			var h v1alpha1.GPUHealth
			if i < len(in.Health) {
				h = in.Health[i]
			}
			st.GPUs[i] = device(&s.Devices[i], h)
		}
		keepSince(st.GPUs, in.Previous, now)
		st.Summary = summarize(st.GPUs)
		ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ReasonScanSucceeded
		ready.Message = fmt.Sprintf("%d GPUs, %d healthy", st.Summary.Count, st.Summary.Healthy)
	}
	st.Conditions = nil
	for _, c := range prevConds {
		st.Conditions = append(st.Conditions, *c.DeepCopy())
	}
	// SetStatusCondition keeps lastTransitionTime unless the status changes.
	meta.SetStatusCondition(&st.Conditions, ready)
	return st
}

// unknown makes every Healthy GPU Unknown; other verdicts, sticky ones
// above all, stay.
func unknown(gpus []v1alpha1.GPUDevice, why string) {
	for i := range gpus {
		if h := &gpus[i].Health; h.State == v1alpha1.GPUHealthy {
			*h = v1alpha1.GPUHealth{State: v1alpha1.GPUUnknown, Reason: ReasonScansFailing, Message: why, Since: h.Since}
		}
	}
}

func device(d *nvml.Device, h v1alpha1.GPUHealth) v1alpha1.GPUDevice {
	g := v1alpha1.GPUDevice{
		Index:        int32(d.Index),
		UUID:         d.UUID,
		Product:      d.Name,
		MemoryMiB:    d.MemoryMiB(),
		Architecture: d.Architecture,
		PCIBusID:     d.PCIBusID,
		Health:       h,
		Errors:       append([]string(nil), d.Errors...),
	}
	if d.ComputeMajor > 0 {
		g.ComputeCapability = fmt.Sprintf("%d.%d", d.ComputeMajor, d.ComputeMinor)
	}
	if d.MIG != nil {
		g.MIG = &v1alpha1.MIGStatus{Capable: true, Current: migMode(d.MIG.Current), Pending: migMode(d.MIG.Pending)}
		for _, m := range d.MIG.Devices {
			g.MIG.Devices = append(g.MIG.Devices, v1alpha1.MIGDevice{
				Index: int32(m.Index), UUID: m.UUID, Profile: m.Profile, MemoryMiB: m.MemoryMiB,
			})
		}
	}
	if d.Fabric != nil {
		g.Fabric = &v1alpha1.FabricStatus{State: d.Fabric.State, Status: d.Fabric.Status}
	}
	return g
}

func migMode(on bool) string {
	if on {
		return "Enabled"
	}
	return "Disabled"
}

// keepSince stamps each GPU's health with the time its state last changed:
// the previous Since when the same GPU had the same state and reason, now
// otherwise.
func keepSince(gpus []v1alpha1.GPUDevice, prev *v1alpha1.GPUInventoryStatus, now metav1.Time) {
	old := map[string]v1alpha1.GPUHealth{}
	if prev != nil {
		for _, g := range prev.GPUs {
			old[g.UUID] = g.Health
		}
	}
	for i := range gpus {
		h := &gpus[i].Health
		if o, ok := old[gpus[i].UUID]; ok && o.State == h.State && o.Reason == h.Reason && o.Since != nil {
			h.Since = o.Since.DeepCopy()
			continue
		}
		t := now
		h.Since = &t
	}
}

func summarize(gpus []v1alpha1.GPUDevice) v1alpha1.InventorySummary {
	s := v1alpha1.InventorySummary{Count: int32(len(gpus))}
	for i, g := range gpus {
		if g.Health.State == v1alpha1.GPUHealthy {
			s.Healthy++
		}
		p := labels.ProductValue(g.Product)
		switch {
		case i == 0:
			s.Product = p
		case s.Product != p:
			s.Product = MixedProduct
		}
		if g.MemoryMiB > 0 && (s.MemoryMiB == 0 || g.MemoryMiB < s.MemoryMiB) {
			s.MemoryMiB = g.MemoryMiB
		}
	}
	return s
}
