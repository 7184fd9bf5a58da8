package health

import (
	"fmt"
	"sync"
	"time"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

// DefaultIgnoredXIDs are XIDs caused by the application rather than the GPU
// (e.g. 13 graphics engine exception, 31 MMU fault, 43 channel stopped, 45
// preemptive cleanup, 68 video processor exception, 109 context switch
// timeout); the device plugin ignores the same set.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Reasons a GPU is not Healthy.
const (
	ReasonXIDCriticalError         = "XidCriticalError"
	ReasonDoubleBitECCError        = "DoubleBitEccError"
	ReasonGPUIsLost                = "GPUIsLost"
	ReasonRowRemapFailure          = "RowRemapFailure"
	ReasonFabricIncomplete         = "FabricIncomplete"
	ReasonFabricRegistrationFailed = "FabricRegistrationFailed"
	ReasonQueryFailed              = "QueryFailed"
	// ReasonHealthNotRestored: the sticky verdicts the agent's last run
	// published are not read back yet, so a GPU that looks healthy may
	// not be.
	ReasonHealthNotRestored = "HealthNotRestored"
)

// xidHints explain the XIDs operators meet most often.
var xidHints = map[uint64]string{
	48:  "double-bit ECC error",
	63:  "row remapping event",
	64:  "row remapping failure",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// Options configures a Tracker.
type Options struct {
	// IgnoredXIDs are XIDs that do not make a GPU unhealthy. Nil means
	// DefaultIgnoredXIDs; an empty, non-nil slice ignores none.
	IgnoredXIDs []uint64
	// Now stamps sticky verdicts, so that a clear request removes only the
	// verdicts recorded before it. Defaults to time.Now.
	Now func() time.Time
}

// clearHint ends the message of every sticky verdict.
const clearHint = "; reset the GPU, then clear it with the " + v1alpha1.ClearHealthAnnotation + " annotation on the GPUInventory"

// Tracker remembers the health events of each GPU.
type Tracker struct {
	ignored map[uint64]bool
	now     func() time.Time

	mu sync.Mutex
	// sticky holds the verdict of a GPU's first critical event, by UUID;
	// the key "" holds events NVML did not attribute to a GPU.
	sticky map[string]verdict
	// lastXID is the last XID of any kind seen per UUID, for metrics.
	lastXID map[string]uint64
}

type verdict struct {
	reason, message string
	xid             *int32
	// at is when the verdict was recorded.
	at time.Time
}

// NewTracker returns a Tracker.
func NewTracker(opts Options) *Tracker {
	ids := opts.IgnoredXIDs
	if ids == nil {
		ids = DefaultIgnoredXIDs
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := &Tracker{ignored: map[uint64]bool{}, now: opts.Now, sticky: map[string]verdict{}, lastXID: map[string]uint64{}}
	for _, x := range ids {
		t.ignored[x] = true
	}
	return t
}

// Ignored reports whether xid leaves a GPU healthy.
func (t *Tracker) Ignored(xid uint64) bool { return t.ignored[xid] }

// Observe records e and reports whether it can change any GPU's health, in
// which case the caller should rescan.
func (t *Tracker) Observe(e nvml.Event) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Kind {
	case nvml.EventXID:
		t.lastXID[e.UUID] = e.XID
		if t.ignored[e.XID] {
			return false
		}
		if _, seen := t.sticky[e.UUID]; seen {
			return false // the first critical event is the one to act on
		}
		x := int32(e.XID)
		msg := fmt.Sprintf("XID %d", e.XID)
		if hint, ok := xidHints[e.XID]; ok {
			msg += " (" + hint + ")"
		}
		t.sticky[e.UUID] = verdict{reason: ReasonXIDCriticalError, message: msg + clearHint, xid: &x, at: t.now()}
		return true
	case nvml.EventDoubleBitECC:
		if _, seen := t.sticky[e.UUID]; seen {
			return false
		}
		t.sticky[e.UUID] = verdict{reason: ReasonDoubleBitECCError, message: "uncorrectable ECC error" + clearHint, at: t.now()}
		return true
	case nvml.EventGPULost:
		return true // the scan finds which GPU answers GPU_IS_LOST
	}
	return false
}

// Restore takes over the sticky verdicts published before (by an earlier run
// of the agent), matching GPUs by UUID: a GPU whose UUID changed is another
// GPU. A restored verdict replaces one seen since, which is newer. It
// returns the UUIDs restored.
func (t *Tracker) Restore(gpus []v1alpha1.GPUDevice) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var restored []string
	for _, g := range gpus {
		h := g.Health
		if !h.Sticky || h.State != v1alpha1.GPUUnhealthy || g.UUID == "" {
			continue
		}
		v := verdict{reason: h.Reason, message: h.Message}
		if h.LastXID != nil {
			x := *h.LastXID
			v.xid = &x
		}
		if h.Since != nil {
			v.at = h.Since.Time
		}
		t.sticky[g.UUID] = v
		restored = append(restored, g.UUID)
	}
	return restored
}

// Clear removes the sticky verdicts recorded at or before before, of the GPUs
// in uuids, or of every GPU when all is set; verdicts recorded later are
// newer than the request and stay. present are the GPUs the agent sees: an
// event NVML did not attribute marks each of them, so that clearing some
// leaves the others unhealthy. It returns the UUIDs cleared.
func (t *Tracker) Clear(all bool, uuids []string, before time.Time, present []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.sticky[""]; ok && !v.at.After(before) {
		for _, u := range present {
			if _, own := t.sticky[u]; !own && u != "" {
				t.sticky[u] = v
			}
		}
		delete(t.sticky, "")
	}
	want := map[string]bool{}
	for _, u := range uuids {
		want[u] = true
	}
	var cleared []string
	for u, v := range t.sticky {
		if (all || want[u]) && !v.at.After(before) {
			delete(t.sticky, u)
			cleared = append(cleared, u)
		}
	}
	return cleared
}

// LastXID is the last XID of any kind seen on the GPU, and whether one was.
func (t *Tracker) LastXID(uuid string) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if x, ok := t.lastXID[uuid]; ok {
		return x, true
	}
	x, ok := t.lastXID[""]
	return x, ok
}

// Evaluate returns the health of d (without Since, which the inventory keeps).
// A sticky verdict comes first, also for a lost GPU: it is the first critical
// event, and publishing it keeps it across agent restarts and reboots.
func (t *Tracker) Evaluate(d *nvml.Device) v1alpha1.GPUHealth {
	t.mu.Lock()
	v, ok := t.sticky[d.UUID]
	if !ok {
		v, ok = t.sticky[""]
	}
	t.mu.Unlock()
	if ok {
		h := v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: v.reason, Message: v.message, Sticky: true}
		if v.xid != nil {
			x := *v.xid
			h.LastXID = &x
		}
		return h
	}
	if d.Lost {
		return v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: ReasonGPUIsLost,
			Message: "NVML answers GPU_IS_LOST: the GPU is unreachable until it is reset or the node rebooted"}
	}
	if d.RemappedRows.Failure {
		return v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: ReasonRowRemapFailure,
			Message: fmt.Sprintf("row remapping failed (%d uncorrectable rows remapped); the GPU needs service", d.RemappedRows.Uncorrectable)}
	}
	if f := d.Fabric; f != nil && !f.Complete() {
		if f.State == nvml.FabricCompleted {
			return v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: ReasonFabricRegistrationFailed,
				Message: "NVLink fabric registration failed: " + f.Status}
		}
		return v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: ReasonFabricIncomplete,
			Message: "NVLink fabric state is " + f.State + "; is nvidia-fabricmanager running?"}
	}
	if d.UUID == "" {
		return v1alpha1.GPUHealth{State: v1alpha1.GPUUnknown, Reason: ReasonQueryFailed,
			Message: "the GPU could not be identified: " + firstOr(d.Errors, "no UUID")}
	}
	return v1alpha1.GPUHealth{State: v1alpha1.GPUHealthy}
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}
