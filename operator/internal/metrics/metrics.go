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

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// phases is a gauge of objects by phase, kept from the last phase seen per
// object, so it needs no list of everything. Every known phase is served
// from the start at zero, as kube-state-metrics does: a phase an object
// passes through between two scrapes still has a series, so its first
// change is seen.
type phases struct {
	gauge *prometheus.GaugeVec
	mu    sync.Mutex
	last  map[types.NamespacedName]string
}

func newPhases[P ~string](name, help string, known ...P) *phases {
	p := &phases{gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"phase"}),
		last: map[types.NamespacedName]string{}}
	for _, phase := range known {
		p.gauge.WithLabelValues(string(phase))
	}
	return p
}

// set records an object's current phase.
func (p *phases) set(key types.NamespacedName, phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.last[key]; ok {
		if old == phase {
			return
		}
		p.gauge.WithLabelValues(old).Dec()
	}
	p.last[key] = phase
	p.gauge.WithLabelValues(phase).Inc()
}

// forget drops a deleted object.
func (p *phases) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.last[key]; ok {
		p.gauge.WithLabelValues(old).Dec()
		delete(p.last, key)
	}
}

// Clusters records GPUCluster lifecycle metrics.
type Clusters struct {
	timeToBound     prometheus.Histogram
	timeToReady     prometheus.Histogram
	phases          *phases
	podGroupUpdates prometheus.Counter
	unschedulable   *prometheus.CounterVec
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
		phases: newPhases("gpulab_clusters", "GPUClusters by phase.",
			gpulabv1alpha1.ClusterPending, gpulabv1alpha1.ClusterUnschedulable, gpulabv1alpha1.ClusterScheduling,
			gpulabv1alpha1.ClusterProvisioning, gpulabv1alpha1.ClusterReady, gpulabv1alpha1.ClusterSuspended, gpulabv1alpha1.ClusterFailed),
		podGroupUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpulab_podgroup_writes_total",
			Help: "PodGroups created or updated by the operator.",
		}),
		unschedulable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulab_unschedulable_decisions_total",
			Help: "Times a GPUCluster was found unable to ever fit the healthy GPU capacity, by reason.",
		}, []string{"reason"}),
	}
	// Known reasons start at zero, so increase() sees the first decision.
	for _, reason := range []string{gpulabv1alpha1.ReasonInsufficientGPUs, gpulabv1alpha1.ReasonNoMatchingNodes} {
		m.unschedulable.WithLabelValues(reason)
	}
	reg.MustRegister(m.timeToBound, m.timeToReady, m.phases.gauge, m.podGroupUpdates, m.unschedulable)
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
func (m *Clusters) SetPhase(key types.NamespacedName, phase string) { m.phases.set(key, phase) }

// Forget drops a deleted cluster from the phase gauge.
func (m *Clusters) Forget(key types.NamespacedName) { m.phases.forget(key) }

// Jobs records GPUJob metrics.
type Jobs struct {
	duration    *prometheus.HistogramVec
	timeToStart prometheus.Histogram
	phases      *phases
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
		phases: newPhases("gpulab_jobs", "GPUJobs by phase.",
			gpulabv1alpha1.JobPending, gpulabv1alpha1.JobProvisioning, gpulabv1alpha1.JobRunning,
			gpulabv1alpha1.JobSucceeded, gpulabv1alpha1.JobFailed, gpulabv1alpha1.JobSuspended),
	}
	// Both results start at zero, so rate() sees the first finished job.
	for _, result := range []string{string(gpulabv1alpha1.JobSucceeded), string(gpulabv1alpha1.JobFailed)} {
		m.duration.WithLabelValues(result)
	}
	reg.MustRegister(m.duration, m.timeToStart, m.phases.gauge)
	return m
}

// SetPhase records a job's current phase.
func (m *Jobs) SetPhase(key types.NamespacedName, phase string) { m.phases.set(key, phase) }

// Forget drops a deleted job from the phase gauge.
func (m *Jobs) Forget(key types.NamespacedName) { m.phases.forget(key) }

// ObserveDuration records a finished job.
func (m *Jobs) ObserveDuration(result string, d time.Duration) {
	m.duration.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveTimeToStart records how long a job waited for its submitter.
func (m *Jobs) ObserveTimeToStart(d time.Duration) { m.timeToStart.Observe(d.Seconds()) }
