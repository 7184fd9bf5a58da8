package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
)

func TestPhaseGaugeFollowsObjects(t *testing.T) {
	m := NewClusters(prometheus.NewRegistry())
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	m.SetPhase(a, "Pending")
	m.SetPhase(b, "Pending")
	m.SetPhase(a, "Ready")
	m.SetPhase(a, "Ready")
	if got := testutil.ToFloat64(m.phases.gauge.WithLabelValues("Pending")); got != 1 {
		t.Errorf("Pending = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.phases.gauge.WithLabelValues("Ready")); got != 1 {
		t.Errorf("Ready = %v, want 1", got)
	}
	m.Forget(a)
	m.Forget(a)
	if got := testutil.ToFloat64(m.phases.gauge.WithLabelValues("Ready")); got != 0 {
		t.Errorf("Ready after delete = %v, want 0", got)
	}
	if got := testutil.CollectAndCount(m.unschedulable); got != 2 {
		t.Errorf("%d unschedulable series at start, want both known reasons at 0", got)
	}
}
