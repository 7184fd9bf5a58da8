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

// Every phase is served from the start, at zero: a phase an object passes
// through between two scrapes (Provisioning, when status writes coalesce)
// still has a series, and rate() and the dashboards see its first change.
func TestEveryPhaseStartsAtZero(t *testing.T) {
	clusters, jobs := NewClusters(prometheus.NewRegistry()), NewJobs(prometheus.NewRegistry())
	if got := testutil.CollectAndCount(clusters.phases.gauge); got != 7 {
		t.Errorf("%d GPUCluster phase series at start, want all 7 phases at 0", got)
	}
	if got := testutil.CollectAndCount(jobs.phases.gauge); got != 6 {
		t.Errorf("%d GPUJob phase series at start, want all 6 phases at 0", got)
	}
	if got := testutil.ToFloat64(clusters.phases.gauge.WithLabelValues("Provisioning")); got != 0 {
		t.Errorf("Provisioning = %v at start, want 0", got)
	}
}
