// Command gpulab-testbed builds, starts, inspects and stops gpulab's local
// testbed: a real Kubernetes control plane, Volcano and kwok fake GPU nodes
// (and, with --kuberay, KubeRay's operator), all as processes on loopback.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gpulab/gpulab/internal/version"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/local"
)

const usage = `usage: gpulab-testbed <command> [flags]

commands:
  build    build the testbed binaries from the Go module proxy (cached)
  up       start the testbed and wait until it is ready (--kuberay: with KubeRay;
           --autoscaler=karpenter: with Karpenter's kwok provider adding GPU nodes;
           --volcano-version, --kuberay-version: which releases)
  down     stop the testbed and remove its state
  status   show the testbed's processes, nodes and queue
  restart  restart one component by its PID (gpulab-testbed restart kube-apiserver)
  env      print KUBECONFIG and KUBEBUILDER_ASSETS exports for a shell
  version  print the version (also --version)

The testbed name is a DNS-1123 label (lower-case letters, digits, '-').

flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return // asked for help: printed, and not an error
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpulab-testbed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gpulab-testbed", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults(); fmt.Fprint(fs.Output(), kindUsage) }
	name := fs.String("name", local.DefaultName, "testbed (kwokctl cluster) name, a DNS-1123 label [$TESTBED_NAME]")
	nodes := fs.String("nodes", envOr("TESTBED_NODES", local.DefaultFleet),
		"fake GPU nodes as profile=count,... ("+fmt.Sprint(local.ProfileNames())+") [$TESTBED_NODES]")
	cache := fs.String("cache-dir", "", "cache for binaries and testbed state (default $GPULAB_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/gpulab)")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long `up` waits for nodes, Volcano and the queue")
	monitoring := fs.Bool("monitoring", false, "build: also build Prometheus, promtool and the Pushgateway (the dashboards' checks)")
	volcanoVersion := fs.String("volcano-version", "", volcanoVersionUsage)
	dra := fs.Bool("dra", false, "up: have the agent publish every fake node's GPUs as DRA devices (ResourceSlices of gpu.gpulab.io, a pool per node) and install their DeviceClass gpu.gpulab.io")
	nativeGangs := fs.Bool("native-gangs", false, "up: turn on Kubernetes' own gang scheduling (the GenericWorkload gate in kube-apiserver, kube-scheduler and kube-controller-manager; scheduling.k8s.io/v1beta1 PodGroups served) beside Volcano")
	kuberay := fs.Bool("kuberay", false, "build: also build KubeRay's operator; up: also run KubeRay's operator (--kuberay-version) with its CRDs, gang-scheduling RayClusters through Volcano")
	kuberayVersion := fs.String("kuberay-version", "", "build --kuberay, up --kuberay: KubeRay's operator version, one of "+
		strings.Join(binaries.KubeRayVersions(), ", ")+" (default $"+binaries.KubeRayVersionEnv+", else "+binaries.DefaultKubeRayVersion+") [$"+binaries.KubeRayVersionEnv+"]")
	kuberayConcurrency := fs.Int("kuberay-reconcile-concurrency", 0, "up --kuberay: the operator's --reconcile-concurrency (0: KubeRay's default, 1)")
	kuberayQPS := fs.Float64("kuberay-qps", 0, "up --kuberay: the operator's client --qps (0: KubeRay's default)")
	kuberayBurst := fs.Int("kuberay-burst", 0, "up --kuberay: the operator's client --burst (0: KubeRay's default)")
	autoscaler := fs.String("autoscaler", local.AutoscalerNone, "build: also build it; up: the node autoscaler to run, one of "+
		strings.Join(local.Autoscalers(), ", ")+" ("+local.AutoscalerKarpenter+": Karpenter "+binaries.KarpenterVersion+
		"'s kwok provider, adding GPU nodes of the testbed's profiles for pending pods)")
	autoscalerMaxGPUs := fs.Int("autoscaler-max-gpus", local.DefaultAutoscalerMaxGPUs, "up --autoscaler=karpenter: the most nvidia.com/gpu its NodePool may add (its limits)")
	if len(args) == 0 {
		fs.Usage()
		return errors.New("missing command")
	}
	cmd := args[0]
	switch cmd {
	case "-h", "-help", "--help", "help":
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return flag.ErrHelp
	case "version", "-version", "--version":
		// Like every gpulab binary: answered before any flag is checked.
		fmt.Println("gpulab-testbed", version.Get())
		return nil
	}
	if kindCommands[cmd] {
		return runKind(ctx, cmd, args[1:])
	}
	if env, ok := os.LookupEnv("TESTBED_NAME"); ok {
		*name = env
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	// Before anything else: the name becomes folders that `down` removes. An
	// empty name given on purpose is a mistake too (an unset variable), not
	// a request for the default.
	if err := local.ValidateName(*name); err != nil {
		return fmt.Errorf("--name / $TESTBED_NAME: %w", err)
	}
	fleet, err := local.ParseFleet(*nodes)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %s", *timeout)
	}
	if *kuberayConcurrency < 0 || *kuberayQPS < 0 || *kuberayBurst < 0 {
		return fmt.Errorf("--kuberay-reconcile-concurrency, --kuberay-qps and --kuberay-burst must not be negative, got %d, %v, %d",
			*kuberayConcurrency, *kuberayQPS, *kuberayBurst)
	}
	if err := local.ValidateAutoscaler(*autoscaler); err != nil {
		return fmt.Errorf("--autoscaler: %w", err)
	}
	if *autoscalerMaxGPUs <= 0 {
		return fmt.Errorf("--autoscaler-max-gpus must be positive, got %d", *autoscalerMaxGPUs)
	}
	tb, err := local.New(local.Options{
		Name: *name, CacheDir: *cache, Fleet: fleet, Log: os.Stdout, ReadyTimeout: *timeout, VolcanoVersion: *volcanoVersion,
		NativeGangs: *nativeGangs, DRA: *dra, KubeRay: *kuberay, KubeRayVersion: *kuberayVersion, KubeRayReconcileConcurrency: *kuberayConcurrency, KubeRayQPS: *kuberayQPS, KubeRayBurst: *kuberayBurst,
		Autoscaler: *autoscaler, AutoscalerMaxGPUs: *autoscalerMaxGPUs,
	})
	if err != nil {
		return err
	}
	switch cmd {
	case "build":
		opts := binaries.Options{CacheDir: *cache, Log: os.Stdout, VolcanoVersion: *volcanoVersion, KubeRayVersion: *kuberayVersion}
		if _, err := binaries.Ensure(ctx, opts); err != nil {
			return err
		}
		if *kuberay {
			if _, err := binaries.EnsureKubeRay(ctx, opts); err != nil {
				return err
			}
		}
		if *monitoring {
			if _, err := binaries.EnsureMonitoring(ctx, opts); err != nil {
				return err
			}
		}
		if *autoscaler == local.AutoscalerKarpenter {
			if _, err := binaries.EnsureKarpenter(ctx, opts); err != nil {
				return err
			}
		}
		return nil
	case "up":
		return tb.Up(ctx)
	case "down":
		if err := tb.Down(ctx); err != nil {
			return err
		}
		fmt.Printf("testbed %q is down\n", tb.Name())
		return nil
	case "status":
		return printStatus(ctx, tb)
	case "restart":
		if fs.NArg() != 1 {
			return fmt.Errorf("restart takes one component, one of %v", local.ComponentNames())
		}
		if err := tb.Restart(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Printf("%s of testbed %q restarted\n", fs.Arg(0), tb.Name())
		return nil
	case "env":
		return printEnv(ctx, tb, *cache)
	default:
		fs.Usage()
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func printStatus(ctx context.Context, tb *local.Testbed) error {
	s, err := tb.Status(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("testbed %q (%s)\nkubeconfig: %s\n\n", s.Name, tb.Versions(), s.Kubeconfig)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "COMPONENT\tPID\tSTATE\tLOG")
	dead := 0
	for _, c := range s.Components {
		state := "running"
		if !c.Running {
			state, dead = "STOPPED", dead+1
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", c.Name, c.PID, state, c.Log)
	}
	_ = w.Flush()
	fmt.Printf("\nkube-apiserver https://127.0.0.1:%d, etcd 127.0.0.1:%d, kwok-controller 127.0.0.1:%d", s.Ports.KubeAPIServer, s.Ports.Etcd, s.Ports.KwokController)
	fmt.Printf("\nvolcano: scheduler metrics http://127.0.0.1:%d/metrics, healthz :%d; controller-manager healthz :%d\ngpulab-agent: metrics http://127.0.0.1:%d/metrics\n",
		s.Ports.SchedulerMetrics, s.Ports.SchedulerHealthz, s.Ports.ControllerManagerHealthz, s.Ports.AgentMetrics)
	if s.KubeRay {
		fmt.Printf("kuberay: ray-operator metrics http://127.0.0.1:%d/metrics, healthz :%d\n", s.Ports.KubeRayMetrics, s.Ports.KubeRayHealthz)
	}
	if s.Autoscaler == local.AutoscalerKarpenter {
		fmt.Printf("karpenter: karpenter-kwok metrics http://127.0.0.1:%d/metrics, healthz :%d; NodePool %s\n",
			s.Ports.KarpenterMetrics, s.Ports.KarpenterHealthz, local.KarpenterNodePool)
	}
	if s.APIError != nil {
		return fmt.Errorf("API server unreachable: %w", s.APIError)
	}
	fmt.Printf("nodes: %d/%d Ready, %d GPUs allocatable; default queue: %s\n", s.NodesReady, s.Nodes, s.GPUs, s.Queue)
	if dead > 0 {
		return fmt.Errorf("%d component(s) stopped: see their logs above", dead)
	}
	return nil
}

func printEnv(ctx context.Context, tb *local.Testbed, cache string) error {
	v := tb.Versions()
	set, err := binaries.Lookup(ctx, binaries.Options{CacheDir: cache, VolcanoVersion: v.Volcano, KubeRayVersion: v.KubeRay})
	if err != nil {
		return err
	}
	cacheDir := cache
	if cacheDir == "" {
		if cacheDir, err = binaries.DefaultCacheDir(); err != nil {
			return err
		}
	}
	assets, err := set.EnvtestAssets(cacheDir)
	if err != nil {
		return err
	}
	fmt.Printf("export KUBECONFIG=%s\nexport KUBEBUILDER_ASSETS=%s\n", tb.Kubeconfig(), assets)
	return nil
}

// volcanoVersionUsage is --volcano-version's help, shared by the local and
// the kind commands.
var volcanoVersionUsage = "build, up, kind-build, kind-up: the Volcano version, one of " + strings.Join(binaries.VolcanoVersions(), ", ") +
	" (default $" + binaries.VolcanoVersionEnv + ", else " + binaries.DefaultVolcanoVersion + ") [$" + binaries.VolcanoVersionEnv + "]"

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
