package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/internal/filelock"
	"github.com/gpulab/gpulab/testbeds/testbed"
)

// Options configures a local testbed. The zero value is a usable default.
type Options struct {
	// Name is the kwokctl cluster name, a DNS-1123 label (see ValidateName).
	// Defaults to DefaultName.
	Name string
	// CacheDir holds binaries, sources and testbed state. Defaults to
	// binaries.DefaultCacheDir() (the per-user gpulab cache).
	CacheDir string
	// Fleet is the fake GPU nodes. Defaults to ParseFleet(DefaultFleet).
	Fleet Fleet
	// CRDDir holds the gpulab CRDs to install. Defaults to
	// operator/config/crd/bases at the repository root.
	CRDDir string
	// Log receives progress lines. Defaults to io.Discard.
	Log io.Writer
	// ReadyTimeout bounds the wait for nodes, Volcano and the queue after
	// the control plane is up. Defaults to 2 minutes.
	ReadyTimeout time.Duration
	// AgentBinary is the gpulab-agent that publishes the fake nodes'
	// inventories. Defaults to one built from the repository.
	AgentBinary string
	// VolcanoVersion is the Volcano to build and run, one of
	// binaries.VolcanoVersions; its CRDs, scheduler configuration and
	// controller flags follow it. Defaults to $GPULAB_VOLCANO_VERSION, else
	// binaries.DefaultVolcanoVersion.
	VolcanoVersion string
	// KubeRayVersion is the KubeRay operator to build and run with
	// KubeRay, one of binaries.KubeRayVersions. Defaults to
	// $GPULAB_KUBERAY_VERSION, else binaries.DefaultKubeRayVersion.
	KubeRayVersion string
	// KubeRay runs KubeRay's operator (KubeRayVersion) with its CRDs,
	// gang-scheduling RayClusters through Volcano. Off by default.
	KubeRay bool
	// NativeGangs turns on Kubernetes' own gang scheduling: the
	// GenericWorkload gate in kube-apiserver, kube-scheduler and
	// kube-controller-manager, and scheduling.k8s.io/v1beta1 (PodGroups)
	// served (NativeGangKwokctlOptions). Volcano runs beside it.
	NativeGangs bool
	// DRA has the agent publish every fake node's GPUs as Dynamic Resource
	// Allocation devices (ResourceSlices of dra.DefaultDriverName, a pool
	// per node) and installs their DeviceClass; kube-scheduler allocates
	// claims from them. The nodes' nvidia.com/gpu capacity stays: a run
	// asks for GPUs one way or the other, never both.
	DRA bool
	// KubeRayReconcileConcurrency is the operator's --reconcile-concurrency
	// (RayClusters, RayJobs and RayServices each reconciled at once). 0
	// keeps KubeRay's default, 1.
	KubeRayReconcileConcurrency int
	// KubeRayQPS and KubeRayBurst are its API client's --qps and --burst
	// (0 keeps KubeRay's defaults), so a comparison can give it what the
	// gpulab operator gets.
	KubeRayQPS   float64
	KubeRayBurst int
	// Autoscaler is the node autoscaler the testbed runs, one of
	// Autoscalers: AutoscalerNone (the default; "" means it) or
	// AutoscalerKarpenter, Karpenter's kwok provider
	// (binaries.KarpenterVersion) with a NodePool of the GPU profiles'
	// instance types, whose nodes kwok runs and the agent simulates like
	// the fleet's.
	Autoscaler string
	// AutoscalerMaxGPUs caps the nvidia.com/gpu the autoscaler may add (the
	// NodePool's limits). Defaults to DefaultAutoscalerMaxGPUs.
	AutoscalerMaxGPUs int
}

// DefaultName is the testbed name when Options.Name is empty.
const DefaultName = "gpulab"

// ErrAlreadyRunning is returned by Up when the testbed is already up.
var ErrAlreadyRunning = errors.New("testbed is already running")

// ErrInvalidName is returned for a testbed name that is not a DNS-1123 label.
var ErrInvalidName = errors.New("invalid testbed name")

// ValidateName accepts a DNS-1123 label (lower-case letters, digits and
// '-', at most 63 characters): the name becomes a folder under the cache
// that Down removes, so "..", "/" or an empty name must never get there.
func ValidateName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%w %q: %s", ErrInvalidName, name, strings.Join(errs, "; "))
	}
	return nil
}

// Testbed is one local cluster, identified by its name and cache directory.
type Testbed struct {
	opts Options
}

var _ testbed.Testbed = (*Testbed)(nil)

// New fills in defaults and checks the name; it starts nothing and touches
// nothing on disk.
func New(opts Options) (*Testbed, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if err := ValidateName(opts.Name); err != nil {
		return nil, err
	}
	if opts.CacheDir == "" {
		dir, err := binaries.DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		opts.CacheDir = dir
	}
	abs, err := filepath.Abs(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	opts.CacheDir = abs
	if opts.Fleet == nil {
		fleet, err := ParseFleet(DefaultFleet)
		if err != nil {
			return nil, err
		}
		opts.Fleet = fleet
	}
	if opts.CRDDir == "" {
		root, err := repo.Root()
		if err != nil {
			return nil, err
		}
		opts.CRDDir = filepath.Join(root, "operator", "config", "crd", "bases")
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	// An unknown version fails here, before anything is built or started.
	if opts.VolcanoVersion, err = binaries.ResolveVolcanoVersion(opts.VolcanoVersion); err != nil {
		return nil, err
	}
	if _, err := volcanoReleaseOf(opts.VolcanoVersion); err != nil {
		return nil, err
	}
	if opts.KubeRayVersion, err = binaries.ResolveKubeRayVersion(opts.KubeRayVersion); err != nil {
		return nil, err
	}
	if opts.Autoscaler == "" {
		opts.Autoscaler = AutoscalerNone
	}
	if err := ValidateAutoscaler(opts.Autoscaler); err != nil {
		return nil, err
	}
	if opts.AutoscalerMaxGPUs == 0 {
		opts.AutoscalerMaxGPUs = DefaultAutoscalerMaxGPUs
	}
	if opts.AutoscalerMaxGPUs < 0 {
		return nil, fmt.Errorf("the autoscaler's GPU limit must be positive, got %d", opts.AutoscalerMaxGPUs)
	}
	if opts.KubeRayReconcileConcurrency < 0 || opts.KubeRayQPS < 0 || opts.KubeRayBurst < 0 {
		return nil, fmt.Errorf("KubeRay's reconcile concurrency, QPS and burst must not be negative, got %d, %v, %d",
			opts.KubeRayReconcileConcurrency, opts.KubeRayQPS, opts.KubeRayBurst)
	}
	return &Testbed{opts: opts}, nil
}

// Name is the kwokctl cluster name.
func (t *Testbed) Name() string { return t.opts.Name }

// check refuses a Testbed that did not come from New (a zero Testbed would
// resolve its folders relative to the working directory, with no name).
func (t *Testbed) check() error {
	if t == nil || !filepath.IsAbs(t.opts.CacheDir) {
		return errors.New("testbed not created with local.New")
	}
	return ValidateName(t.opts.Name)
}

// kwokWorkdir is KWOK_WORKDIR for every kwokctl call, so clusters live in the
// cache, not in the user's ~/.kwok.
func (t *Testbed) kwokWorkdir() string { return filepath.Join(t.opts.CacheDir, "kwok") }

// Workdir is kwokctl's folder for this cluster: pki, pids, logs, kubeconfig.
func (t *Testbed) Workdir() string {
	return filepath.Join(t.kwokWorkdir(), "clusters", t.opts.Name)
}

// Kubeconfig is the path of the cluster's admin kubeconfig.
func (t *Testbed) Kubeconfig() string { return filepath.Join(t.Workdir(), "kubeconfig.yaml") }

// stateDir holds gpulab's own files for the cluster (kwokctl config,
// Volcano's scheduler conf, chosen ports, the features it runs).
func (t *Testbed) stateDir() string {
	return filepath.Join(t.opts.CacheDir, "testbeds", t.opts.Name)
}

// Up builds what is missing, starts the cluster and waits until the fleet's
// nodes are Ready with their GPUInventory, Volcano runs and its default
// queue is Open (and, with Options.KubeRay, KubeRay's operator is ready;
// with Options.Autoscaler AutoscalerKarpenter, Karpenter's provider is,
// with its NodePool).
func (t *Testbed) Up(ctx context.Context) (err error) {
	if err := t.check(); err != nil {
		return err
	}
	// One bring-up at a time per cache, for all of it: ports are picked and
	// bound, binaries and the agent built into shared paths, and on 2 cores
	// control planes starting together slow each other past their timeouts.
	// A running testbed does not hold it.
	lock, err := filelock.Acquire(ctx, filepath.Join(t.opts.CacheDir, "testbeds", ".up.lock"),
		fmt.Sprintf("pid %d starting testbed %q", os.Getpid(), t.opts.Name), func(heldBy string) {
			fmt.Fprintf(t.opts.Log, "waiting for another testbed to finish starting (%s)\n", heldBy)
		})
	if err != nil {
		return err
	}
	defer lock.Release()
	own, err := t.lockTestbed(ctx)
	if err != nil {
		return err
	}
	defer own.Release()

	if _, statErr := os.Stat(t.Workdir()); statErr == nil {
		if t.apiServerRunning() {
			return fmt.Errorf("%w: %q (kubeconfig %s); run `make testbed-down` first", ErrAlreadyRunning, t.opts.Name, t.Kubeconfig())
		}
		fmt.Fprintf(t.opts.Log, "removing stopped testbed %q left from an earlier run\n", t.opts.Name)
		if err := t.Down(ctx); err != nil {
			return err
		}
	}

	bopts := binaries.Options{CacheDir: t.opts.CacheDir, Log: t.opts.Log,
		VolcanoVersion: t.opts.VolcanoVersion, KubeRayVersion: t.opts.KubeRayVersion}
	bins, err := binaries.Ensure(ctx, bopts)
	if err != nil {
		return err
	}
	if t.opts.KubeRay {
		if _, err := binaries.EnsureKubeRay(ctx, bopts); err != nil {
			return err
		}
	}
	var karpenterBin *binaries.Karpenter
	if t.opts.Autoscaler == AutoscalerKarpenter {
		if karpenterBin, err = binaries.EnsureKarpenter(ctx, bopts); err != nil {
			return err
		}
	}

	start := time.Now()
	// A half-started cluster is worse than none: tear it down on failure,
	// keeping the logs' location in the error.
	defer func() {
		if err != nil {
			if downErr := t.Down(context.WithoutCancel(ctx)); downErr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up: %w", downErr))
			}
			err = fmt.Errorf("%w\n(the testbed was torn down; its logs are in %s)", err, t.LogArchive())
		}
	}()

	agent, err := t.agentBinary(ctx)
	if err != nil {
		return err
	}
	// Picked last, just before kwokctl binds them: the shorter the wait, the
	// smaller the chance that something outside gpulab takes one.
	ports, err := allocatePorts(filepath.Dir(t.stateDir()))
	if err != nil {
		return err
	}
	// Recorded at once: it is what other testbeds' pickers skip.
	if err := writePorts(t.stateDir(), ports); err != nil {
		return err
	}
	if err := writeFeatures(t.stateDir(), t.wantedFeatures()); err != nil {
		return err
	}
	volcano, err := newVolcanoSetup(t.stateDir(), t.Kubeconfig(), ports, bins.VolcanoVersion)
	if err != nil {
		return err
	}
	var kuberay *kubeRaySetup
	if t.opts.KubeRay {
		kuberay = &kubeRaySetup{kubeconfig: t.Kubeconfig(), ports: ports, reconcileConcurrency: t.opts.KubeRayReconcileConcurrency,
			qps: t.opts.KubeRayQPS, burst: t.opts.KubeRayBurst}
	}
	var karpenter *karpenterSetup
	if karpenterBin != nil {
		karpenter = newKarpenterSetup(t.stateDir(), t.Kubeconfig(), ports, karpenterBin)
	}
	if err := t.createCluster(ctx, bins, volcano, kuberay, karpenter, agent); err != nil {
		return err
	}
	t.recordIdentities()
	fmt.Fprintf(t.opts.Log, "control plane up in %s\n", time.Since(start).Round(100*time.Millisecond))

	c, err := t.Client()
	if err != nil {
		return err
	}
	if err := installCRDs(ctx, c, volcano.crdDirs(bins)...); err != nil {
		return fmt.Errorf("installing Volcano CRDs: %w", err)
	}
	if err := t.startVolcanoAgain(ctx, bins, ports); err != nil {
		return err
	}
	if kuberay != nil {
		if err := installCRDs(ctx, c, kubeRayCRDDir(bins)); err != nil {
			return fmt.Errorf("installing KubeRay CRDs: %w", err)
		}
		// kwokctl starts every component at once, and KubeRay's operator
		// exits when the API server does not answer yet: start it again
		// now that the API serves its CRDs (its first log is kept).
		if t.runningPID(kubeRayComponent) == 0 {
			if err := t.restartLocked(ctx, bins, ports, kubeRayComponent); err != nil {
				return err
			}
		}
	}
	if err := installCRDs(ctx, c, t.opts.CRDDir); err != nil {
		return fmt.Errorf("installing gpulab CRDs: %w", err)
	}
	if err := applyDefaultQueue(ctx, c); err != nil {
		return err
	}
	if t.opts.DRA {
		if err := applyDeviceClass(ctx, c); err != nil {
			return err
		}
	}
	if err := createLeaseNamespace(ctx, c); err != nil {
		return err
	}
	if err := createNodes(ctx, c, t.opts.Fleet.Nodes()); err != nil {
		return err
	}
	if karpenter != nil {
		// After the fleet's nodes: Karpenter counts them as capacity
		// before it adds any.
		if err := t.startKarpenter(ctx, c, bins, ports, karpenter); err != nil {
			return err
		}
	}
	if err := t.WaitReady(ctx); err != nil {
		return err
	}
	fmt.Fprintf(t.opts.Log, "testbed %q ready in %s: %d nodes (%s), %d GPUs, %s\nkubeconfig: %s\n",
		t.opts.Name, time.Since(start).Round(100*time.Millisecond), len(t.opts.Fleet.Nodes()), t.opts.Fleet, t.opts.Fleet.GPUs(), t.Versions(), t.Kubeconfig())
	return nil
}

// Down stops every process of the cluster and removes its state. It is safe
// to call on a testbed that is not running.
func (t *Testbed) Down(ctx context.Context) error {
	if err := t.check(); err != nil {
		return err
	}
	// Stale pid files go before kwokctl delete, which signals what they name.
	own := t.ownProcesses()
	// Keep the logs past the cluster's removal: a failed Up or test points
	// at them.
	errs := []error{archiveLogs(filepath.Join(t.Workdir(), "logs"), t.LogArchive())}
	deleted := false
	if _, err := os.Stat(t.Workdir()); err == nil {
		bins, err := binaries.Lookup(ctx, t.binariesOptions())
		if err != nil {
			errs = append(errs, err)
		} else if err := t.kwokctl(ctx, bins, "delete", "cluster", "--name", t.opts.Name); err != nil {
			errs = append(errs, err)
		} else {
			deleted = true
		}
	}
	if !deleted {
		// kwokctl did not stop them: do it here rather than wait.
		for _, id := range own {
			errs = append(errs, signal(id, syscall.SIGTERM))
		}
	}
	// Make sure they are gone, so no port stays bound, killing only the
	// processes this testbed started.
	if err := waitExited(ctx, own, 30*time.Second); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, os.RemoveAll(t.Workdir()), os.RemoveAll(t.stateDir()))
	return errors.Join(errs...)
}

// binariesOptions are the binaries of this testbed: the versions it runs
// (recorded when it is up), else those Options ask for.
func (t *Testbed) binariesOptions() binaries.Options {
	v := t.Versions()
	return binaries.Options{CacheDir: t.opts.CacheDir, VolcanoVersion: v.Volcano, KubeRayVersion: v.KubeRay}
}

// lockTestbed takes this testbed's own lock, held by Up and Restart. It
// lives beside the state folder, which Down removes.
func (t *Testbed) lockTestbed(ctx context.Context) (*filelock.Lock, error) {
	return filelock.Acquire(ctx, filepath.Join(t.opts.CacheDir, "testbeds", "."+t.opts.Name+".lock"),
		fmt.Sprintf("pid %d", os.Getpid()), func(heldBy string) {
			fmt.Fprintf(t.opts.Log, "waiting for another start or restart of testbed %q (%s)\n", t.opts.Name, heldBy)
		})
}

// LogArchive is where Down keeps the component logs of the last cluster.
func (t *Testbed) LogArchive() string {
	return filepath.Join(t.opts.CacheDir, "logs", "testbed-"+t.opts.Name)
}

// archiveLogs replaces dst with a copy of the log files in src, if any.
func archiveLogs(src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.log"))
	if err != nil || len(files) == 0 {
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
