// Command gpulab-operator runs the gpulab operator: GPUClusters as head and
// worker pods, gang-scheduled by Volcano or by kube-scheduler's native gang
// scheduling, sized from real GPU capacity.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/version"
	"github.com/gpulab/gpulab/operator/internal/controller/gpucluster"
	"github.com/gpulab/gpulab/operator/internal/manager"
)

func main() {
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	var opts manager.Options
	var namespaces string
	var qps float64
	var burst int
	flag.IntVar(&opts.ReconcileConcurrency, "reconcile-concurrency", manager.DefaultReconcileConcurrency, "GPUClusters reconciled in parallel")
	flag.DurationVar(&opts.ReconcileTimeout, "reconcile-timeout", 0, "bound on one reconcile (default 1m)")
	flag.DurationVar(&opts.FirstStatusDelay, "first-status-delay", gpucluster.DefaultFirstStatusDelay,
		"how long a new GPUCluster's first status waits while it only says the gang is on its way (verdicts and Ready are written at once; 0 keeps the default)")
	flag.StringVar(&namespaces, "watch-namespace", "", "comma-separated namespaces to watch (empty: all)")
	flag.BoolVar(&opts.LeaderElect, "leader-elect", inCluster, "elect a leader among replicas (default on in-cluster)")
	flag.StringVar(&opts.AgentLeaseNamespace, "agent-lease-namespace", gpulabv1alpha1.DefaultHeartbeatLeaseNamespace,
		"namespace of the node agents' heartbeat Leases (the agent's --lease-namespace)")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader Lease (default: the pod's namespace)")
	flag.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", ":8080", "address of /metrics; 0 disables")
	flag.BoolVar(&opts.SecureMetrics, "metrics-secure", inCluster, "serve /metrics over HTTPS behind Kubernetes authn/authz (default on in-cluster)")
	flag.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&opts.PprofBindAddress, "pprof-bind-address", "", "address of /debug/pprof/ (CPU, heap, block, mutex); empty disables")
	flag.Float64Var(&qps, "kube-api-qps", manager.DefaultKubeAPIQPS, "client QPS to the API server")
	flag.IntVar(&burst, "kube-api-burst", manager.DefaultKubeAPIBurst, "client burst to the API server")
	showVersion := flag.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	// --kubeconfig is registered by controller-runtime's config loader.
	flag.Parse()
	if *showVersion {
		fmt.Println("gpulab-operator", version.Get())
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if namespaces != "" {
		opts.WatchNamespaces = strings.Split(namespaces, ",")
	}
	if err := run(opts, qps, burst); err != nil {
		fmt.Fprintln(os.Stderr, "gpulab-operator:", err)
		os.Exit(1)
	}
}

func run(opts manager.Options, qps float64, burst int) error {
	if qps <= 0 || burst < 1 {
		return fmt.Errorf("--kube-api-qps must be positive and --kube-api-burst at least 1 (got %v, %d)", qps, burst)
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	if opts.PprofBindAddress != "" && opts.PprofBindAddress != "0" {
		// Sampled, not every event: a blocked worker shows within a run
		// without slowing the operator measurably.
		runtime.SetBlockProfileRate(int((100 * time.Microsecond).Nanoseconds()))
		runtime.SetMutexProfileFraction(100)
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := manager.New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting gpulab-operator", "leaderElect", opts.LeaderElect, "namespaces", opts.WatchNamespaces)
	return mgr.Start(ctx)
}
