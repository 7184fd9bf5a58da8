package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/gpulab/gpulab/internal/version"
	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
	"github.com/gpulab/gpulab/node-agent/simulator"
)

const simulatorProfileLabel = simulator.ProfileLabel

// Exit codes.
const (
	ExitOK       = 0
	ExitError    = 1
	ExitUsage    = 2
	ExitNoDriver = 3
)

const usage = `gpulab-agent reads this node's GPUs over NVML and publishes them as a
GPUInventory, GPU Feature Discovery node labels and per-GPU metrics
(gpulab_gpu_* and the DCGM exporter's DCGM_FI_DEV_*, with the pod holding each
GPU from the kubelet's pod-resources API). With --device-plugin it also serves
them to the kubelet as nvidia.com/gpu, in place of the NVIDIA device plugin:
  gpulab-agent --device-plugin   (mount /var/lib/kubelet/device-plugins from the host)

usage:
  gpulab-agent [flags]                         run the agent
  gpulab-agent inventory [-o json|yaml|table]  print this node's inventory and exit

exit codes: 0 ok, 1 error, 2 bad usage, 3 no NVIDIA driver

flags:
`

// Main runs the command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "inventory" {
		return inventoryMain(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("gpulab-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	f.register(fs)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpulab-agent: unexpected argument %q (the only command is inventory)\n", fs.Arg(0))
		return ExitUsage
	}
	if err := f.validate(fs); err != nil {
		fmt.Fprintln(stderr, "gpulab-agent:", err)
		return ExitUsage
	}
	log := newLogger(stderr, f.logFormat)
	if err := run(ctx, &f, log); err != nil {
		fmt.Fprintln(stderr, "gpulab-agent:", err)
		if errors.Is(err, nvml.ErrNoDriver) {
			return ExitNoDriver
		}
		return ExitError
	}
	return ExitOK
}

func newLogger(w io.Writer, format string) logr.Logger {
	var h slog.Handler = slog.NewJSONHandler(w, nil)
	if format == "text" {
		h = slog.NewTextHandler(w, nil)
	}
	l := logr.FromSlogHandler(h)
	crlog.SetLogger(l)
	klog.SetLogger(l)
	return l
}

// openBackend opens the --nvml backend for node.
func openBackend(spec backendSpec, node string) (nvml.Backend, error) {
	if spec.profile == "" {
		return nvml.NewReal(nvml.Options{}), nil
	}
	return mock.New(spec.profile, node, nvml.Options{})
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "gpulab-agent"
	return cfg, nil
}

func run(ctx context.Context, f *runFlags, log logr.Logger) error {
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.BuildInfo())
	ready := make(chan struct{})
	stopServer, err := serveMetrics(f, cfg, reg, ready, log)
	if err != nil {
		return err
	}
	defer stopServer()

	if f.simulate {
		return simulator.Run(ctx, simulator.Options{
			Config: cfg, Interval: f.interval, IgnoredXIDs: f.ignored, LabelNodes: f.labelNode, LeaseNamespace: f.leaseNamespace,
			AdvertiseCapacity: f.advertiseCapacity, Registerer: reg, MetricsFormat: f.metricsFormat, Log: log,
			DRADriver: f.draDriver, Ready: func(int) { close(ready) },
		})
	}
	plugin, err := newDevicePlugin(f, log)
	if err != nil {
		return err
	}
	cdiSpec, err := newCDIWriter(f)
	if err != nil {
		return err
	}
	draPlugin, err := startDRAPlugin(ctx, f, cfg, log)
	if err != nil {
		return err
	}
	if draPlugin != nil {
		defer draPlugin.Stop()
	}
	owners, closeOwners, err := podAttribution(f, log)
	if err != nil {
		return err
	}
	defer closeOwners()
	if f.advertiseCapacity {
		log.Info("advertising nvidia.com/gpu capacity on the node: meant for testbeds without the device plugin")
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: publisher.NewScheme()})
	if err != nil {
		return fmt.Errorf("creating API client: %w", err)
	}
	m := metrics.New(reg, metrics.Options{Format: f.metricsFormat, Owners: owners})
	b, err := openBackend(f.backend, f.nodeName)
	if err != nil {
		return err
	}
	a, err := agent.New(b, agent.Options{
		NodeName: f.nodeName, Interval: f.interval, IgnoredXIDs: f.ignored, AllowNoGPU: f.allowNoGPU,
		Publisher: publisher.New(c, publisher.Options{LeaseNamespace: f.leaseNamespace, LabelNode: f.labelNode, AdvertiseCapacity: f.advertiseCapacity, Metrics: m}),
		Metrics:   m, Log: log, UnhealthyAfterFailedScans: f.unhealthyAfterFailedScans,
		OnPublished: func() {
			select {
			case <-ready:
			default:
				close(ready)
			}
		},
		OnScanned: func(r *agent.Result) {
			if plugin != nil {
				servePlugin(plugin, cdiSpec, r, log)
			}
			if draPlugin != nil {
				serveDRA(ctx, draPlugin, cdiSpec, r, log)
			}
		},
	})
	if err != nil {
		return err
	}
	log.Info("starting", "node", f.nodeName, "nvml", f.backend.String(), "interval", f.interval, "leaseNamespace", f.leaseNamespace,
		"unhealthyAfterFailedScans", f.unhealthyAfterFailedScans,
		"labelNode", f.labelNode, "ignoredXIDs", f.ignored, "metricsFormat", f.metricsFormat,
		"podResourcesSocket", f.podResourcesSocket, "devicePlugin", f.devicePlugin,
		"deviceListStrategies", f.strategies, "cdiSpecDir", f.cdiSpecDir, "draDriver", f.draDriver)
	return runWithPlugin(ctx, a, plugin)
}

// serveMetrics serves /metrics and, on f.probeAddr or else beside it,
// /healthz and /readyz (ready once the first publish succeeded), until the
// returned function is called. With f.metricsSecure, /metrics is HTTPS and
// answers only callers the API server authenticates and authorizes, as
// kube-rbac-proxy would; the probes stay plain, for the kubelet.
func serveMetrics(f *runFlags, cfg *rest.Config, reg *prometheus.Registry, ready <-chan struct{}, log logr.Logger) (func(), error) {
	probes := http.NewServeMux()
	probes.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	probes.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-ready:
			_, _ = io.WriteString(w, "ok\n")
		default:
			http.Error(w, "not published yet", http.StatusServiceUnavailable)
		}
	})
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	if !disabled(f.metricsAddr) {
		h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
		var tlsConfig *tls.Config
		if f.metricsSecure {
			var err error
			if h, err = authenticated(cfg, h, log); err != nil {
				return nil, err
			}
			if tlsConfig, err = selfSigned(); err != nil {
				return nil, err
			}
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", h)
		if disabled(f.probeAddr) {
			mux.Handle("/", probes)
		}
		s, err := listen("--metrics-bind-address", f.metricsAddr, mux, tlsConfig, log)
		if err != nil {
			return nil, err
		}
		stops = append(stops, s)
	}
	if !disabled(f.probeAddr) {
		s, err := listen("--health-probe-bind-address", f.probeAddr, probes, nil, log)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// authenticated wraps h in TokenReview authentication and SubjectAccessReview
// authorization (get on the request path), cached as kube-rbac-proxy does.
func authenticated(cfg *rest.Config, h http.Handler, log logr.Logger) (http.Handler, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("--metrics-secure: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("--metrics-secure: %w", err)
	}
	h, err = filter(log.WithName("metrics-auth"), h)
	if err != nil {
		return nil, fmt.Errorf("--metrics-secure: %w", err)
	}
	return h, nil
}

// selfSigned is a TLS config with a certificate made at start, in memory (the
// root file system is read-only). It encrypts the scrape; Prometheus finds
// each agent by pod IP and skips verification, as for the operator.
func selfSigned() (*tls.Config, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("gpulab-agent", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("--metrics-secure: generating a certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--metrics-secure: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// listen serves h on addr (TLS when tlsConfig is set) until the returned
// function is called.
func listen(flagName, addr string, h http.Handler, tlsConfig *tls.Config, log logr.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	scheme := "http"
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
		scheme = "https"
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "HTTP server", "flag", flagName)
		}
	}()
	log.Info("serving", "flag", flagName, "url", scheme+"://"+ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
