// Package metrics holds the operator's gpulab_ metrics, registered with
// controller-runtime's registry so they are served beside its standard
// reconcile, workqueue and REST client metrics.
package metrics

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/karpenter"
)

// keyedGauge is a gauge of objects by their labels' values (a phase; a
// node's GPUs and origin), kept from the last values seen per object, so it
// needs no list of everything. Every known value is served from the start at zero, as
// kube-state-metrics does: a phase an object passes through between two
// scrapes still has a series, so its first change is seen.
type keyedGauge struct {
	gauge *prometheus.GaugeVec
	mu    sync.Mutex
	last  map[types.NamespacedName][]string
}

// newPhases is a keyedGauge by phase, each of known served at zero.
func newPhases[P ~string](name, help string, known ...P) *keyedGauge {
	values := make([][]string, 0, len(known))
	for _, phase := range known {
		values = append(values, []string{string(phase)})
	}
	return newKeyedGauge(name, help, []string{"phase"}, values...)
}

// newKeyedGauge is a keyedGauge over labels, each of known (a value per
// label) served at zero.
func newKeyedGauge(name, help string, labels []string, known ...[]string) *keyedGauge {
	p := &keyedGauge{gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels),
		last: map[types.NamespacedName][]string{}}
	for _, values := range known {
		p.gauge.WithLabelValues(values...)
	}
	return p
}

// set records an object's current label values.
func (p *keyedGauge) set(key types.NamespacedName, values ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.last[key]; ok {
		if slices.Equal(old, values) {
			return
		}
		p.gauge.WithLabelValues(old...).Dec()
	}
	p.last[key] = values
	p.gauge.WithLabelValues(values...).Inc()
}

// forget drops a deleted object.
func (p *keyedGauge) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.last[key]; ok {
		p.gauge.WithLabelValues(old...).Dec()
		delete(p.last, key)
	}
}

// Clusters records GPUCluster lifecycle metrics, and the nodes the
// clusters are placed on.
type Clusters struct {
	timeToBound     prometheus.Histogram
	timeToReady     prometheus.Histogram
	phases          *keyedGauge
	podGroupUpdates prometheus.Counter
	unschedulable   *prometheus.CounterVec
	nodes           *keyedGauge
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
			gpulabv1alpha1.ClusterPending, gpulabv1alpha1.ClusterUnschedulable, gpulabv1alpha1.ClusterWaitingForNodes, gpulabv1alpha1.ClusterScheduling,
			gpulabv1alpha1.ClusterProvisioning, gpulabv1alpha1.ClusterReady, gpulabv1alpha1.ClusterSuspended, gpulabv1alpha1.ClusterFailed),
		podGroupUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpulab_podgroup_writes_total",
			Help: "PodGroups created or updated by the operator.",
		}),
		unschedulable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulab_unschedulable_decisions_total",
			Help: "Times a GPUCluster was found unable to ever fit the healthy GPU capacity, by reason.",
		}, []string{"reason"}),
		nodes: newKeyedGauge("gpulab_nodes",
			"Nodes the operator sees, by whether they have GPUs (allocatable nvidia.com/gpu or a GFD product label) and whether an autoscaler added them (Karpenter's karpenter.sh/nodepool label).",
			[]string{"gpu", "autoscaled"}, []string{"false", "false"}, []string{"false", "true"}, []string{"true", "false"}, []string{"true", "true"}),
	}
	// Known reasons start at zero, so increase() sees the first decision.
	for _, reason := range []string{gpulabv1alpha1.ReasonInsufficientGPUs, gpulabv1alpha1.ReasonNoMatchingNodes} {
		m.unschedulable.WithLabelValues(reason)
	}
	reg.MustRegister(m.timeToBound, m.timeToReady, m.phases.gauge, m.podGroupUpdates, m.unschedulable, m.nodes.gauge)
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

// NodeEvents keeps gpulab_nodes from a watch of Nodes. It takes every
// event, heartbeats too: the device plugin's GPUs and an autoscaler's label
// may come after the node registered. It enqueues nothing.
func (m *Clusters) NodeEvents() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			m.setNode(e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			m.setNode(e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			m.nodes.forget(types.NamespacedName{Name: e.Object.GetName()})
		},
	}
}

// setNode records a node's gpulab_nodes labels: gpu, whether it has GPUs
// (allocatable nvidia.com/gpu, or GFD's product label where none is
// allocatable: GPUs claimed through DRA, or all of them sick), and
// autoscaled, whether Karpenter added it (other autoscalers' nodes count
// as not autoscaled).
func (m *Clusters) setNode(obj client.Object) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	gpus := n.Status.Allocatable[gfd.GPUResource]
	_, pooled := n.Labels[karpenter.NodePoolLabel]
	m.nodes.set(types.NamespacedName{Name: n.Name}, strconv.FormatBool(!gpus.IsZero() || n.Labels[gfd.Product] != ""), strconv.FormatBool(pooled))
}

// Jobs records GPUJob metrics.
type Jobs struct {
	duration    *prometheus.HistogramVec
	timeToStart prometheus.Histogram
	phases      *keyedGauge
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
