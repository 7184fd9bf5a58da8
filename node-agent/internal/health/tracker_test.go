package health_test

import (
	"testing"

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
