// Package metrics holds the operator's gpulab_ metrics, registered with
// controller-runtime's registry so they are served beside its standard
// reconcile, workqueue and REST client metrics.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Clusters records GPUCluster lifecycle metrics. The phase gauge is kept
// from the last phase seen per cluster, so it needs no list of everything.
type Clusters struct {
	timeToBound     prometheus.Histogram
	timeToReady     prometheus.Histogram
	phases          *prometheus.GaugeVec
	podGroupUpdates prometheus.Counter
	unschedulable   *prometheus.CounterVec

	mu    sync.Mutex
	phase map[types.NamespacedName]string
}

// latencyBuckets span a fake node's sub-second start to a real cluster's
// minutes-long image pull.
var latencyBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}

// NewClusters builds the metrics and registers them with reg (controller-
// runtime's registry when nil).
func NewClusters(reg prometheus.Registerer) *Clusters {
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	m := &Clusters{
		timeToBound: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpulab_cluster_time_to_bound_seconds",
			Help:    "Time from GPUCluster creation until every desired pod was first bound to a node.",
			Buckets: latencyBuckets,
		}),
		timeToReady: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpulab_cluster_time_to_ready_seconds",
			Help:    "Time from GPUCluster creation until every desired pod was first Ready.",
			Buckets: latencyBuckets,
		}),
		phases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpulab_clusters",
			Help: "GPUClusters by phase.",
		}, []string{"phase"}),
		podGroupUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpulab_podgroup_writes_total",
			Help: "PodGroups created or updated by the operator.",
		}),
		unschedulable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulab_unschedulable_decisions_total",
			Help: "Times a GPUCluster was found unable to ever fit the healthy GPU capacity, by reason.",
		}, []string{"reason"}),
		phase: map[types.NamespacedName]string{},
	}
	reg.MustRegister(m.timeToBound, m.timeToReady, m.phases, m.podGroupUpdates, m.unschedulable)
	return m
}

// ObserveBound records a cluster's time to all pods bound.
func (m *Clusters) ObserveBound(d time.Duration) { m.timeToBound.Observe(d.Seconds()) }

// ObserveReady records a cluster's time to Ready.
func (m *Clusters) ObserveReady(d time.Duration) { m.timeToReady.Observe(d.Seconds()) }

// PodGroupUpdated counts a PodGroup write.
func (m *Clusters) PodGroupUpdated() { m.podGroupUpdates.Inc() }

// Unschedulable counts a decision that a cluster can never fit.
func (m *Clusters) Unschedulable(reason string) { m.unschedulable.WithLabelValues(reason).Inc() }

// SetPhase records a cluster's current phase.
func (m *Clusters) SetPhase(key types.NamespacedName, phase string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.phase[key]; ok {
		if old == phase {
			return
		}
		m.phases.WithLabelValues(old).Dec()
	}
	m.phase[key] = phase
	m.phases.WithLabelValues(phase).Inc()
}

// Forget drops a deleted cluster from the phase gauge.
func (m *Clusters) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.phase[key]; ok {
		m.phases.WithLabelValues(old).Dec()
		delete(m.phase, key)
	}
}

// Jobs records GPUJob metrics.
type Jobs struct {
	duration    *prometheus.HistogramVec
	timeToStart prometheus.Histogram
}

// jobBuckets span a smoke test's seconds to a training run's day.
var jobBuckets = prometheus.ExponentialBuckets(1, 2.5, 14)

// NewJobs builds the GPUJob metrics and registers them with reg
// (controller-runtime's registry when nil).
func NewJobs(reg prometheus.Registerer) *Jobs {
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	m := &Jobs{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpulab_job_duration_seconds",
			Help:    "Time from GPUJob start to its verdict, by result (Succeeded, Failed).",
			Buckets: jobBuckets,
		}, []string{"result"}),
		timeToStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpulab_job_time_to_start_seconds",
			Help:    "Time from GPUJob creation until a submitter was created on a Ready cluster.",
			Buckets: latencyBuckets,
		}),
	}
	reg.MustRegister(m.duration, m.timeToStart)
	return m
}

// ObserveDuration records a finished job.
func (m *Jobs) ObserveDuration(result string, d time.Duration) {
	m.duration.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveTimeToStart records how long a job waited for its submitter.
func (m *Jobs) ObserveTimeToStart(d time.Duration) { m.timeToStart.Observe(d.Seconds()) }
