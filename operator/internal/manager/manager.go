// Package manager assembles the gpulab operator: scheme, caches restricted
// to what the operator owns, leader election, metrics and health endpoints,
// and the controllers. main and the tests build the same manager here.
package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/internal/version"
	"github.com/gpulab/gpulab/operator/internal/controller/gpucluster"
	"github.com/gpulab/gpulab/operator/internal/controller/gpujob"
	"github.com/gpulab/gpulab/operator/internal/metrics"
	"github.com/gpulab/gpulab/operator/internal/scheduler"
)

// Scheme holds every kind the operator reads or writes.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(schedulingv1beta1.AddToScheme(Scheme))
	utilruntime.Must(gpulabv1alpha1.AddToScheme(Scheme))
}

// LeaderElectionID is the Lease the operator's replicas compete for.
const LeaderElectionID = "gpulab-operator.gpulab.io"

// Options configures the operator. Field comments give the defaults that
// Validate fills in.
type Options struct {
	// ReconcileConcurrency is the number of parallel reconciles. Default
	// DefaultReconcileConcurrency.
	ReconcileConcurrency int
	// ReconcileTimeout bounds one reconcile. Default 1m.
	ReconcileTimeout time.Duration
	// WatchNamespaces restricts the operator to these namespaces; empty
	// means all.
	WatchNamespaces []string
	// AgentLeaseNamespace holds the node agents' heartbeat Leases (the
	// agent's --lease-namespace). Default
	// gpulabv1alpha1.DefaultHeartbeatLeaseNamespace.
	AgentLeaseNamespace string
	// LeaderElect enables leader election (on by default in-cluster).
	LeaderElect bool
	// LeaderElectionNamespace holds the Lease. Default: the pod's namespace
	// in-cluster; required out of cluster when LeaderElect is set.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election.
	// Defaults 15s, 10s, 2s (controller-runtime's).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsBindAddress serves /metrics; "0" disables. Default ":8080".
	MetricsBindAddress string
	// SecureMetrics serves metrics over HTTPS behind Kubernetes authn/authz.
	SecureMetrics bool
	// HealthProbeBindAddress serves /healthz and /readyz. Default ":8081".
	HealthProbeBindAddress string
	// PprofBindAddress serves net/http/pprof under /debug/pprof/; empty or
	// "0" disables (the default). Block and mutex profiles are sampled only
	// while it is on.
	PprofBindAddress string
	// Metrics and JobMetrics receive the gpulab_ metrics. Default: fresh
	// sets registered with controller-runtime's registry.
	Metrics    *metrics.Clusters
	JobMetrics *metrics.Jobs
	// StatusCoalesce is how long a GPUCluster's progress-only status
	// change waits after its previous write (gpucluster.Options).
	StatusCoalesce time.Duration
	// FirstStatusDelay is how long a new GPUCluster's first status waits
	// while it only says the gang is on its way (gpucluster.Options).
	FirstStatusDelay time.Duration
	// SkipNameValidation lets tests run several managers in one process.
	SkipNameValidation bool
}

// The operator's defaults are the configuration its benchmarks measure
// (docs/benchmarks/operator-changes.md): a reconcile mostly waits on the
// API server, not the CPU, so 64 workers keep a burst of gangs from
// queueing in the operator (at 16, a burst of 300 gangs waited 15-23 s
// for its last PodGroups, the no-operator floor 2 s), and a client limit
// of 1,000 QPS (burst 2,000) keeps the client's own rate limiter from being
// what a burst waits on; API Priority and Fairness on the server side is
// what bounds the operator's share (docs/operator/production.md).
const (
	DefaultReconcileConcurrency = 64
	DefaultKubeAPIQPS           = 1000
	DefaultKubeAPIBurst         = 2000
)

// Validate checks the options and fills in defaults.
func (o *Options) Validate() error {
	var errs []error
	if o.ReconcileConcurrency == 0 {
		o.ReconcileConcurrency = DefaultReconcileConcurrency
	}
	if o.ReconcileConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--reconcile-concurrency must be at least 1, got %d", o.ReconcileConcurrency))
	}
	if o.ReconcileTimeout == 0 {
		o.ReconcileTimeout = time.Minute
	}
	if o.FirstStatusDelay < 0 {
		errs = append(errs, fmt.Errorf("--first-status-delay must not be negative, got %s", o.FirstStatusDelay))
	}
	if o.ReconcileTimeout < 0 {
		errs = append(errs, fmt.Errorf("--reconcile-timeout must be positive, got %s", o.ReconcileTimeout))
	}
	for _, ns := range o.WatchNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--watch-namespace %q is not a namespace name: %v", ns, msgs))
		}
	}
	if o.AgentLeaseNamespace == "" {
		o.AgentLeaseNamespace = gpulabv1alpha1.DefaultHeartbeatLeaseNamespace
	}
	if msgs := validation.IsDNS1123Label(o.AgentLeaseNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--agent-lease-namespace %q is not a namespace name: %v", o.AgentLeaseNamespace, msgs))
	}
	if o.MetricsBindAddress == "" {
		o.MetricsBindAddress = ":8080"
	}
	if o.HealthProbeBindAddress == "" {
		o.HealthProbeBindAddress = ":8081"
	}
	return errors.Join(errs...)
}

// New builds the operator's manager with its controllers registered.
func New(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// The pod cache holds only gpulab's pods, so memory follows gpulab's
	// pods, not the cluster's.
	owned, err := labels.NewRequirement(gpulabv1alpha1.ClusterLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	submitters, err := labels.NewRequirement(gpujob.JobLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	cacheOpts := cache.Options{
		// Nothing reads managedFields, which were 15% of the cached
		// objects' bytes at 100 gangs (the heap at the burst's peak).
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:     {Label: labels.NewSelector().Add(*owned)},
			&corev1.Service{}: {Label: labels.NewSelector().Add(*owned)},
			// Only submitter Jobs: the cluster's other Jobs are not ours.
			&batchv1.Job{}: {Label: labels.NewSelector().Add(*submitters)},
			// Only the agents' heartbeats, wherever the operator watches.
			&coordinationv1.Lease{}: {
				Namespaces: map[string]cache.Config{opts.AgentLeaseNamespace: {}},
				Label:      labels.SelectorFromSet(labels.Set{gpulabv1alpha1.HeartbeatLeaseLabel: "true"}),
			},
		},
	}
	if len(opts.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range opts.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	metricsOpts := metricsserver.Options{BindAddress: opts.MetricsBindAddress, SecureServing: opts.SecureMetrics}
	if opts.SecureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mopts := ctrl.Options{
		Scheme: Scheme,
		Cache:  cacheOpts,
		// Unstructured reads from the cache too: the only such kind is
		// Karpenter's NodePool, which the GPUCluster controller already
		// watches, so its reads need no round trip of their own.
		Client:                        client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		PprofBindAddress:              opts.PprofBindAddress,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	}
	if opts.LeaseDuration > 0 {
		mopts.LeaseDuration = &opts.LeaseDuration
	}
	if opts.RenewDeadline > 0 {
		mopts.RenewDeadline = &opts.RenewDeadline
	}
	if opts.RetryPeriod > 0 {
		mopts.RetryPeriod = &opts.RetryPeriod
	}
	if mopts.NewClient, err = newClient(); err != nil {
		return nil, err
	}
	// Client latency and client-side throttling, for the Operator dashboard.
	ctrlmetrics.RegisterRESTClientMetrics(ctrlmetrics.MetricRequestLatency, ctrlmetrics.MetricRateLimiterLatency)
	// Which build runs; tests start several managers in one process.
	if err := ctrlmetrics.Registry.Register(version.BuildInfo()); err != nil && !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		return nil, fmt.Errorf("registering gpulab_build_info: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	m := opts.Metrics
	if m == nil {
		m = metrics.NewClusters(nil)
	}
	volcano, err := served(mgr, schedulingv1beta1.SchemeGroupVersion.WithKind("PodGroup"), "Volcano's API")
	if err != nil {
		return nil, err
	}
	if !volcano {
		ctrl.Log.WithName("setup").Info("Volcano's PodGroup API is not served: GPUClusters with scheduler volcano will report VolcanoNotInstalled until it is installed and the operator restarted")
	}
	// The scheduling.k8s.io version the operator writes: the
	// GenericWorkload gate and that version's runtime-config.
	native, err := served(mgr, scheduler.NativePodGroupVersion.WithKind("PodGroup"), "the scheduling.k8s.io PodGroup API")
	if err != nil {
		return nil, err
	}
	if !native {
		ctrl.Log.WithName("setup").Info("scheduling.k8s.io PodGroups are not served (GenericWorkload gate off): GPUClusters with scheduler kubernetes will report WorkloadAPINotServed until the API is served and the operator restarted",
			"version", scheduler.NativePodGroupVersion.String())
	}
	// Kubernetes 1.34+: capacity counts DRA devices too.
	dra, err := served(mgr, resourceapi.SchemeGroupVersion.WithKind("ResourceSlice"), "the resource.k8s.io/v1 API")
	if err != nil {
		return nil, err
	}
	nodePools, err := served(mgr, karpenter.NodePoolKind, "Karpenter's NodePool API")
	if err != nil {
		return nil, err
	}
	r := gpucluster.New(mgr, m, gpucluster.Options{
		MaxConcurrentReconciles: opts.ReconcileConcurrency,
		ReconcileTimeout:        opts.ReconcileTimeout,
		VolcanoInstalled:        volcano,
		NativeGangsServed:       native,
		DRAServed:               dra,
		NodePoolsServed:         nodePools,
		StatusCoalesce:          opts.StatusCoalesce,
		FirstStatusDelay:        opts.FirstStatusDelay,
		AgentLeaseNamespace:     opts.AgentLeaseNamespace,
		SkipNameValidation:      opts.SkipNameValidation,
	})
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return nil, err
	}
	jm := opts.JobMetrics
	if jm == nil {
		jm = metrics.NewJobs(nil)
	}
	jobs := gpujob.New(mgr, jm, gpujob.Options{MaxConcurrentReconciles: opts.ReconcileConcurrency, SkipNameValidation: opts.SkipNameValidation})
	if err := jobs.SetupWithManager(ctx, mgr); err != nil {
		return nil, err
	}
	return mgr, nil
}

// served says whether the API server serves kind in its version (what,
// for the error). The controllers only watch an optional API (Volcano's
// PodGroups, native gangs, DRA, Karpenter's NodePools) where it is
// served, so a cluster without it still runs everything else.
func served(mgr ctrl.Manager, gvk schema.GroupVersionKind, what string) (bool, error) {
	_, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil {
		return true, nil
	}
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return false, fmt.Errorf("discovering %s: %w", what, err)
}
