package health_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/health"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

func TestIgnoredXIDs(t *testing.T) {
	tr := health.NewTracker(health.Options{})
	for _, x := range []uint64{13, 31, 43, 45, 68, 109} {
		if tr.Observe(nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: x}) {
			t.Errorf("application XID %d must not call for a rescan", x)
		}
	}
	d := &nvml.Device{UUID: "GPU-a"}
	if h := tr.Evaluate(d); h.State != v1alpha1.GPUHealthy {
		t.Errorf("after application XIDs: %+v", h)
	}
	if x, ok := tr.LastXID("GPU-a"); !ok || x != 109 {
		t.Errorf("LastXID: %d %v, want 109 (ignored XIDs are still reported)", x, ok)
	}

	custom := health.NewTracker(health.Options{IgnoredXIDs: []uint64{79}})
	if custom.Observe(nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: 79}) || !custom.Observe(nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: 13}) {
		t.Error("a configured ignore list replaces the default one")
	}
	none := health.NewTracker(health.Options{IgnoredXIDs: []uint64{}})
	if !none.Observe(nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: 13}) {
		t.Error("an empty ignore list ignores nothing")
	}
}

func TestCriticalXIDIsSticky(t *testing.T) {
	tr := health.NewTracker(health.Options{})
	if !tr.Observe(nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: 79}) {
		t.Fatal("a critical XID must call for a rescan")
	}
	if tr.Observe(nvml.Event{UUID: "GPU-a", Kind: nvml.EventXID, XID: 48}) {
		t.Error("a second XID on an unhealthy GPU changes nothing")
	}
	h := tr.Evaluate(&nvml.Device{UUID: "GPU-a"})
	if h.State != v1alpha1.GPUUnhealthy || h.Reason != health.ReasonXIDCriticalError || h.LastXID == nil || *h.LastXID != 79 {
		t.Errorf("GPU-a: %+v", h)
	}
	if h := tr.Evaluate(&nvml.Device{UUID: "GPU-b"}); h.State != v1alpha1.GPUHealthy {
		t.Errorf("GPU-b must stay healthy: %+v", h)
	}
	if !tr.Observe(nvml.Event{UUID: "GPU-b", Kind: nvml.EventDoubleBitECC}) {
		t.Error("a double-bit ECC error must call for a rescan")
	}
	if tr.Observe(nvml.Event{UUID: "GPU-c", Kind: nvml.EventSingleBitECC}) {
		t.Error("a corrected ECC error changes nothing")
	}
	if h := tr.Evaluate(&nvml.Device{UUID: "GPU-b"}); h.Reason != health.ReasonDoubleBitECCError {
		t.Errorf("GPU-b: %+v", h)
	}
}

func TestEvaluatePrecedence(t *testing.T) {
	tr := health.NewTracker(health.Options{})
	for _, tc := range []struct {
		name   string
		d      nvml.Device
		state  v1alpha1.HealthState
		reason string
	}{
		{"healthy", nvml.Device{UUID: "u", Fabric: &nvml.Fabric{State: nvml.FabricCompleted, Status: "Success"}}, v1alpha1.GPUHealthy, ""},
		{"fabric not supported", nvml.Device{UUID: "u", Fabric: &nvml.Fabric{State: nvml.FabricNotSupported}}, v1alpha1.GPUHealthy, ""},
		{"lost", nvml.Device{Lost: true, RemappedRows: nvml.RemappedRows{Failure: true}}, v1alpha1.GPUUnhealthy, health.ReasonGPUIsLost},
		{"remap failure", nvml.Device{UUID: "u", RemappedRows: nvml.RemappedRows{Known: true, Failure: true}}, v1alpha1.GPUUnhealthy, health.ReasonRowRemapFailure},
		{"remap pending", nvml.Device{UUID: "u", RemappedRows: nvml.RemappedRows{Known: true, Pending: true}}, v1alpha1.GPUHealthy, ""},
		{"fabric in progress", nvml.Device{UUID: "u", Fabric: &nvml.Fabric{State: nvml.FabricInProgress}}, v1alpha1.GPUUnhealthy, health.ReasonFabricIncomplete},
		{"fabric failed", nvml.Device{UUID: "u", Fabric: &nvml.Fabric{State: nvml.FabricCompleted, Status: "ERROR_UNKNOWN"}}, v1alpha1.GPUUnhealthy, health.ReasonFabricRegistrationFailed},
		{"unidentified", nvml.Device{Errors: []string{"uuid: ERROR_UNKNOWN"}}, v1alpha1.GPUUnknown, health.ReasonQueryFailed},
	} {
		if h := tr.Evaluate(&tc.d); h.State != tc.state || h.Reason != tc.reason {
			t.Errorf("%s: got %s/%s, want %s/%s", tc.name, h.State, h.Reason, tc.state, tc.reason)
		}
	}
	// An event NVML did not attribute to a GPU applies to all.
	tr.Observe(nvml.Event{Kind: nvml.EventXID, XID: 79})
	if h := tr.Evaluate(&nvml.Device{UUID: "any"}); h.State != v1alpha1.GPUUnhealthy {
		t.Errorf("unattributed XID: %+v", h)
	}
}

// TestRestoreAndClear: sticky verdicts published by an earlier run come back
// by UUID, and a clear request removes only the verdicts older than itself.
func TestRestoreAndClear(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tr := health.NewTracker(health.Options{Now: func() time.Time { return now }})
	published := metav1.NewTime(now.Add(-time.Hour))
	xid := int32(79)
	restored := tr.Restore([]v1alpha1.GPUDevice{
		{UUID: "GPU-a", Health: v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: health.ReasonXIDCriticalError,
			Message: "XID 79", LastXID: &xid, Since: &published, Sticky: true}},
		// Read on every scan, not restored.
		{UUID: "GPU-b", Health: v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: health.ReasonRowRemapFailure}},
		{UUID: "GPU-c", Health: v1alpha1.GPUHealth{State: v1alpha1.GPUHealthy}},
		{Health: v1alpha1.GPUHealth{State: v1alpha1.GPUUnhealthy, Reason: health.ReasonDoubleBitECCError, Sticky: true}},
	})
	if len(restored) != 1 || restored[0] != "GPU-a" {
		t.Errorf("restored %v, want [GPU-a]", restored)
	}
	h := tr.Evaluate(&nvml.Device{UUID: "GPU-a"})
	if h.State != v1alpha1.GPUUnhealthy || !h.Sticky || h.Reason != health.ReasonXIDCriticalError || h.LastXID == nil || *h.LastXID != 79 {
		t.Errorf("restored GPU-a: %+v", h)
	}
	for _, u := range []string{"GPU-b", "GPU-c", "GPU-new"} {
		if h := tr.Evaluate(&nvml.Device{UUID: u}); h.State != v1alpha1.GPUHealthy {
			t.Errorf("%s: %+v", u, h)
		}
	}
	// A sticky verdict also outranks GPU_IS_LOST, so it stays published.
	if h := tr.Evaluate(&nvml.Device{UUID: "GPU-a", Lost: true}); !h.Sticky || h.Reason != health.ReasonXIDCriticalError {
		t.Errorf("lost GPU-a: %+v", h)
	}

	// A request seen now clears GPU-a but not an XID that arrives later.
	request := now
	now = now.Add(time.Second)
	tr.Observe(nvml.Event{UUID: "GPU-c", Kind: nvml.EventXID, XID: 48})
	if got := tr.Clear(true, nil, request, nil); len(got) != 1 || got[0] != "GPU-a" {
		t.Errorf("cleared %v, want [GPU-a]", got)
	}
	if h := tr.Evaluate(&nvml.Device{UUID: "GPU-a"}); h.State != v1alpha1.GPUHealthy || h.Sticky {
		t.Errorf("GPU-a after the clear: %+v", h)
	}
	if h := tr.Evaluate(&nvml.Device{UUID: "GPU-c"}); h.State != v1alpha1.GPUUnhealthy || !h.Sticky {
		t.Errorf("an XID newer than the request must stay: %+v", h)
	}
	if got := tr.Clear(false, []string{"GPU-c"}, now, nil); len(got) != 1 || got[0] != "GPU-c" {
		t.Errorf("cleared %v, want [GPU-c]", got)
	}

	// An unattributed event marks every GPU; clearing one leaves the others.
	tr.Observe(nvml.Event{Kind: nvml.EventDoubleBitECC})
	if got := tr.Clear(false, []string{"GPU-x"}, now, []string{"GPU-x", "GPU-y"}); len(got) != 1 || got[0] != "GPU-x" {
		t.Errorf("cleared %v, want [GPU-x]", got)
	}
	if h := tr.Evaluate(&nvml.Device{UUID: "GPU-x"}); h.State != v1alpha1.GPUHealthy {
		t.Errorf("GPU-x: %+v", h)
	}
	if h := tr.Evaluate(&nvml.Device{UUID: "GPU-y"}); h.Reason != health.ReasonDoubleBitECCError || !h.Sticky {
		t.Errorf("GPU-y: %+v", h)
	}
}
