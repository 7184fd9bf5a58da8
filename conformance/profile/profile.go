// Package profile prepares the cluster a conformance run uses: `local`
// brings up the local testbed and runs two operator replicas as processes;
// `kind` creates a kind cluster with Volcano and gpulab (needs Docker);
// `cluster` uses an existing cluster and checks gpulab and Volcano are there.
package profile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/draclass"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/internal/scheme"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/kind"
	"github.com/gpulab/gpulab/testbeds/local"
	"github.com/gpulab/gpulab/testbeds/testbed"
)

// Options configures a profile.
type Options struct {
	// Profile is local (default), kind or cluster.
	Profile string
	// ClientQPS limits the suite's own client on a cluster (burst twice
	// that). Default 50: gangs "created at once" go out at this rate.
	ClientQPS int
	// Kubeconfig is the cluster profile's kubeconfig. Default: $KUBECONFIG,
	// then ~/.kube/config, then the in-cluster config of a pod.
	Kubeconfig string
	// Context is the kubeconfig context. Default: its current context.
	Context string
	// OperatorNamespace is where gpulab's operator runs (kind, cluster).
	OperatorNamespace string
	// Workload is the gangs the run measures: gpucluster (default),
	// raycluster, vcjob or bare. It decides what the cluster must have, and
	// the local profile runs KubeRay's operator for raycluster.
	Workload string
	// NativeGangs: the gangs are kube-scheduler's own. The local testbed
	// then serves scheduling.k8s.io PodGroups (the GenericWorkload gate);
	// a cluster must serve them already.
	NativeGangs bool
	// DRAGangs: the gangs claim their GPUs through DRA. With no Volcano
	// version chosen ($GPULAB_VOLCANO_VERSION), the local testbed then runs
	// binaries.DefaultDRAVolcanoVersion: the default release as released
	// can allocate one device to two claims, which the suite would report
	// on every run (docs/benchmarks/2026-12-03-dra.md).
	DRAGangs bool
	// DeviceClass is the DRA DeviceClass the run claims GPUs from
	// (--device-class). Default draclass.DriverName, gpulab's agent's. With
	// DRAGangs the preflight fails when the cluster lacks it.
	DeviceClass string
	// OperatorMetricsURL is where the workload's operator serves /metrics,
	// when it was given: for raycluster, a KubeRay that runs outside any
	// Deployment (a process) is then taken as there.
	OperatorMetricsURL string
	// Scale sizes the local fleet: Scale+Scale/4+3 dgx-h100 nodes, enough for
	// Scale latency clusters of 8 GPUs with room to spare.
	Scale int
	// Fleet is the local testbed's fake GPU nodes. Default: sized from Scale.
	Fleet local.Fleet
	// OutDir receives operator logs.
	OutDir string
	// OperatorBinary is the gpulab-operator to run locally. Built from the
	// repository when empty.
	OperatorBinary string
	// Keep leaves the local testbed running after the run.
	Keep bool
	// TestbedName names the local testbed. Default gpulab-conformance.
	TestbedName string
	// Log receives progress lines.
	Log io.Writer
	// Autoscaler is the local testbed's node autoscaler (local.Autoscalers:
	// none, the default, or karpenter, for the autoscaling feature).
	Autoscaler string
	// AutoscalerMaxGPUs is the testbed NodePool's nvidia.com/gpu limit.
	// Default LocalAutoscalerMaxGPUs of the fleet.
	AutoscalerMaxGPUs int
}

// LocalAutoscalerMaxGPUs is the local NodePool's limit: two of the fleet's
// largest nodes. The autoscaling feature grows by at most two nodes, and a
// gang one node larger than the limit is one no NodePool can ever fit.
func LocalAutoscalerMaxGPUs(fleet local.Fleet) int {
	largest := 0
	for _, e := range fleet {
		largest = max(largest, e.Profile.GPUs)
	}
	if largest == 0 {
		return local.DefaultAutoscalerMaxGPUs
	}
	return 2 * largest
}

// Environment is a prepared cluster.
type Environment struct {
	Profile string
	// Testbed is the cluster: a *local.Testbed, a *kind.Cluster, or a
	// testbed.Existing for the cluster profile, whose Down does nothing.
	// Teardown takes it down unless kept.
	Testbed   testbed.Testbed
	Config    *rest.Config
	Client    client.Client
	Operators []*OperatorProcess // local only
	// Name names the cluster: the testbed's, kind's, or the kubeconfig
	// context's ("in-cluster" for a pod's own config).
	Name string
	// HasGPULab says gpulab's CRDs are served (the operator and agent
	// features need them; the raycluster and vcjob workloads do not).
	HasGPULab bool
	// Confinement is what the preflight found of the runner's admission
	// policy (cluster profile only).
	Confinement       string
	operatorBinary    string
	operatorNamespace string
	keep              bool
}

// local is the local profile's testbed, for what only it has (its
// processes' ports, the versions it ran); nil on the other profiles.
func (e *Environment) local() *local.Testbed {
	tb, _ := e.Testbed.(*local.Testbed)
	return tb
}

// Setup prepares the profile's cluster.
func Setup(ctx context.Context, opts Options) (*Environment, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	switch opts.Profile {
	case "", "local":
		return setupLocal(ctx, opts)
	case "cluster":
		return Connect(ctx, opts)
	case "kind":
		return setupKind(ctx, opts)
	default:
		return nil, fmt.Errorf("unknown --profile %q: want local, kind or cluster", opts.Profile)
	}
}

// setupLocal brings the local profile up, retrying once: the testbed and
// the operators pick free loopback ports, and on a busy machine a process
// started at the same moment (another test's API server) can take one first.
func setupLocal(ctx context.Context, opts Options) (*Environment, error) {
	if opts.DRAGangs && opts.DeviceClass != "" && opts.DeviceClass != draclass.DriverName {
		// Known before a testbed is made: its agent simulates gpulab's
		// driver, and only that class is installed.
		return nil, fmt.Errorf("--gpu-allocation=dra: the local testbed has no DeviceClass %s, only %s (gpulab's agent simulates its driver); "+
			"run with --device-class=%s, or on a cluster with that driver (--profile=cluster)", opts.DeviceClass, draclass.DriverName, draclass.DriverName)
	}
	env, err := setupLocalOnce(ctx, opts)
	if err == nil {
		return env, nil
	}
	fmt.Fprintf(opts.Log, "local profile setup failed, retrying once: %v\n", err)
	env, retryErr := setupLocalOnce(ctx, opts)
	if retryErr != nil {
		return nil, errors.Join(err, retryErr)
	}
	return env, nil
}

// LocalFleet is the fleet the local profile brings up: opts.Fleet, or
// Scale+Scale/4+3 dgx-h100 nodes.
func LocalFleet(opts Options) (local.Fleet, error) {
	if opts.Fleet != nil {
		return opts.Fleet, nil
	}
	scale := max(opts.Scale, 1)
	return local.ParseFleet(fmt.Sprintf("dgx-h100=%d", scale+scale/4+3))
}

// localVolcanoVersion is the Volcano the local testbed is told to run: ""
// (the testbed's own choice: $GPULAB_VOLCANO_VERSION, else the default)
// unless the gangs claim their GPUs through DRA and no version was chosen.
func localVolcanoVersion(opts Options) string {
	if opts.DRAGangs && os.Getenv(binaries.VolcanoVersionEnv) == "" {
		return binaries.DefaultDRAVolcanoVersion
	}
	return ""
}

func localAutoscalerMaxGPUs(opts Options, fleet local.Fleet) int {
	if opts.Autoscaler != local.AutoscalerKarpenter {
		return 0
	}
	if opts.AutoscalerMaxGPUs > 0 {
		return opts.AutoscalerMaxGPUs
	}
	return LocalAutoscalerMaxGPUs(fleet)
}

func setupLocalOnce(ctx context.Context, opts Options) (*Environment, error) {
	fleet, err := LocalFleet(opts)
	if err != nil {
		return nil, err
	}
	if opts.TestbedName == "" {
		opts.TestbedName = "gpulab-conformance"
	}
	volcano := localVolcanoVersion(opts)
	if volcano != "" {
		fmt.Fprintf(opts.Log, "DRA gangs: Volcano %s, %s rebuilt on the fixed Kubernetes libraries (VOLCANO_VERSION=%s runs it as released)\n",
			volcano, binaries.DefaultVolcanoVersion, binaries.DefaultVolcanoVersion)
	}
	tb, err := local.New(local.Options{Name: opts.TestbedName, Fleet: fleet, Log: opts.Log, ReadyTimeout: 5 * time.Minute, VolcanoVersion: volcano,
		// KubeRay gets the concurrency and client limits the gpulab
		// operator gets (newOperatorProcess), so their numbers compare.
		KubeRay: opts.Workload == "raycluster", KubeRayReconcileConcurrency: ReconcileConcurrency, NativeGangs: opts.NativeGangs,
		KubeRayQPS: OperatorQPS, KubeRayBurst: OperatorBurst,
		// The dra feature's devices: the agent publishes them beside the
		// nodes' nvidia.com/gpu, which the other features ask for.
		DRA:        true,
		Autoscaler: opts.Autoscaler, AutoscalerMaxGPUs: localAutoscalerMaxGPUs(opts, fleet)})
	if err != nil {
		return nil, err
	}
	if err := tb.Up(ctx); err != nil {
		return nil, err
	}
	// keep applies once setup succeeded; a failed setup always cleans up.
	env := &Environment{Profile: "local", Name: opts.TestbedName, HasGPULab: true, Testbed: tb}
	fail := func(err error) (*Environment, error) {
		return nil, errors.Join(err, env.Teardown(context.WithoutCancel(ctx)))
	}
	if env.Config, err = tb.RESTConfig(); err != nil {
		return fail(err)
	}
	env.Config.QPS, env.Config.Burst = 500, 1000
	if env.Client, err = client.New(env.Config, client.Options{Scheme: scheme.Scheme}); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return fail(err)
	}
	if opts.Workload == "bare" {
		// The floor: nothing but the stack under the suite's own gangs.
		fmt.Fprintln(opts.Log, "no operator running: --workload=bare is the floor without one")
		env.keep = opts.Keep
		return env, nil
	}
	binary, err := operatorBinary(ctx, opts)
	if err != nil {
		return fail(err)
	}
	env.operatorBinary = binary
	for _, name := range []string{"operator-0", "operator-1"} {
		op, err := newOperatorProcess(name, binary, tb.Kubeconfig(), opts.OutDir)
		if err != nil {
			return fail(err)
		}
		env.Operators = append(env.Operators, op)
		if err := op.Start(ctx); err != nil {
			return fail(err)
		}
	}
	fmt.Fprintf(opts.Log, "two operator replicas running (logs in %s)\n", opts.OutDir)
	env.keep = opts.Keep
	return env, nil
}

// operatorBinary builds bin/gpulab-operator from the repository unless one
// was given.
func operatorBinary(ctx context.Context, opts Options) (string, error) {
	if opts.OperatorBinary != "" {
		return filepath.Abs(opts.OperatorBinary)
	}
	root, err := repo.Root()
	if err != nil {
		return "", fmt.Errorf("no --operator-binary given and not inside the repository: %w", err)
	}
	out := filepath.Join(root, "bin", "gpulab-operator")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./operator/cmd/gpulab-operator")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the operator: %w\n%s", err, b)
	}
	return out, nil
}

// LoadConfig is the client config of an existing cluster and the cluster's
// name: kubeconfig (default $KUBECONFIG, then ~/.kube/config) at its
// context (default the current one), else the in-cluster config of a pod.
func LoadConfig(kubeconfig, kubeContext string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	source := "--kubeconfig " + kubeconfig
	if kubeconfig == "" {
		source = "the default kubeconfig ($KUBECONFIG, ~/.kube/config) or the in-cluster config"
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", source, err)
	}
	name := kubeContext
	if raw, err := loader.RawConfig(); err == nil && name == "" {
		name = raw.CurrentContext
	}
	if name == "" {
		name = "in-cluster"
	}
	return cfg, name, nil
}

// Connect checks an existing cluster can run the suite: the API server
// answers and gpulab's and Volcano's CRDs are there. It creates nothing.
func Connect(ctx context.Context, opts Options) (*Environment, error) {
	cfg, name, err := LoadConfig(opts.Kubeconfig, opts.Context)
	if err != nil {
		return nil, err
	}
	// Talk to the API server first, so a wrong address or credentials
	// read as such and not as missing CRDs.
	probe := rest.CopyConfig(cfg)
	probe.Timeout = probeTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", name, err)
	}
	if _, err := dc.ServerVersion(); err != nil {
		return nil, fmt.Errorf("cannot talk to the API server at %s (context %s): %w", cfg.Host, name, err)
	}
	// client-go's default (5/s) would spread a burst of gangs over many
	// seconds and measure the suite's pace, not the operator's.
	cfg.QPS = float32(cmp.Or(opts.ClientQPS, 50))
	cfg.Burst = 2 * int(cfg.QPS)
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, err
	}
	// Every permission the run needs, before anything else: a rule the
	// caller lacks is named now, not met as a Forbidden halfway through.
	if err := checkPermissions(ctx, c); err != nil {
		return nil, err
	}
	// The in-cluster runner runs only under its admission policy: RBAC
	// alone would let it create pods anywhere.
	confinement, err := checkConfinement(ctx, c, dc)
	if err != nil {
		return nil, err
	}
	missing, hasGPULab, err := missingCRDs(ctx, c, opts.Workload, opts.NativeGangs)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the cluster lacks %v, which --workload=%s needs: %s", missing, workloadOrDefault(opts.Workload), installHint(opts.Workload, opts.NativeGangs))
	}
	if opts.NativeGangs {
		if _, err := c.RESTMapper().RESTMapping(schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PodGroup"}, "v1beta1"); err != nil {
			return nil, fmt.Errorf("--scheduler=kubernetes: the cluster does not serve scheduling.k8s.io/v1beta1 PodGroups "+
				"(kube-apiserver, kube-scheduler and kube-controller-manager need --feature-gates=GenericWorkload=true, "+
				"kube-apiserver --runtime-config=scheduling.k8s.io/v1beta1=true): %w", err)
		}
	}
	if opts.DRAGangs {
		if err := checkDeviceClass(ctx, c, opts.DeviceClass); err != nil {
			return nil, err
		}
	}
	if opts.Workload == "raycluster" {
		if err := checkKubeRayBatchScheduler(ctx, c, opts.OperatorMetricsURL); err != nil {
			return nil, err
		}
	}
	env := &Environment{Profile: "cluster", Testbed: testbed.Existing{ClusterName: name, Path: opts.Kubeconfig}, Name: name, Config: cfg, Client: c, HasGPULab: hasGPULab, Confinement: confinement, operatorNamespace: opts.OperatorNamespace}
	return env, nil
}

// checkPermissions fails naming every verb of the suite's ClusterRole
// (conformance/rbac) the caller may not use.
func checkPermissions(ctx context.Context, c client.Client) error {
	missing, err := rbac.Check(ctx, c, rbac.Rules())
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	lines := make([]string, len(missing))
	for i, m := range missing {
		lines[i] = "  " + m.String()
	}
	return fmt.Errorf("preflight: this user lacks %d of the %d permissions the suite needs "+
		"(the %s ClusterRole in conformance/config grants them all):\n%s", len(missing), rbac.Verbs(rbac.Rules()), rbac.Name, strings.Join(lines, "\n"))
}

// probeTimeout bounds the first request to a cluster: an address that
// drops packets would otherwise hang the run.
const probeTimeout = 15 * time.Second

// setupKind creates a kind cluster with Volcano and gpulab installed
// (testbeds/kind; needs Docker), then checks it like an existing cluster.
func setupKind(ctx context.Context, opts Options) (*Environment, error) {
	kc, err := kind.New(ctx, kind.Options{Name: "gpulab-conformance", Log: opts.Log})
	if err != nil {
		return nil, err
	}
	if err := kc.Up(ctx); err != nil {
		return nil, errors.Join(err, kc.Down(context.WithoutCancel(ctx)))
	}
	opts.Kubeconfig, opts.Context = kc.Kubeconfig(), ""
	env, err := Connect(ctx, opts)
	if err != nil {
		return nil, errors.Join(err, kc.Down(context.WithoutCancel(ctx)))
	}
	env.Profile, env.Name, env.Testbed, env.keep = "kind", "gpulab-conformance", kc, opts.Keep
	return env, nil
}

// Teardown stops the operators and takes the testbed down (unless kept;
// an existing cluster's Down does nothing).
func (e *Environment) Teardown(ctx context.Context) error {
	var errs []error
	for _, op := range e.Operators {
		errs = append(errs, op.Stop())
	}
	if e.Testbed != nil && !e.keep {
		errs = append(errs, e.Testbed.Down(ctx))
	}
	return errors.Join(errs...)
}

// AgentMetricsURL is the gpulab-agent's /metrics on the local testbed ("" on
// other profiles, where a Prometheus URL must be given instead).
func (e *Environment) AgentMetricsURL(ctx context.Context) string {
	tb := e.local()
	if tb == nil {
		return ""
	}
	s, err := tb.Status(ctx)
	if err != nil || s.Ports.AgentMetrics == 0 {
		return ""
	}
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", s.Ports.AgentMetrics)
}

// Leader returns the operator replica that holds the lease (local only).
func (e *Environment) Leader(ctx context.Context) (*OperatorProcess, error) {
	var leader *OperatorProcess
	err := poll.Until(ctx, time.Minute, func() (bool, string) {
		for _, op := range e.Operators {
			if op.IsLeader(ctx) {
				leader = op
				return true, ""
			}
		}
		return false, "no replica reports leader_election_master_status 1"
	})
	if err != nil {
		return nil, fmt.Errorf("no operator replica became leader: %w", err)
	}
	return leader, nil
}

// Describe fills in what the run ran on; clusterName overrides e.Name.
func (e *Environment) Describe(ctx context.Context, scale int, clusterName string) results.Environment {
	if clusterName == "" {
		clusterName = e.Name
	}
	env := results.Environment{Profile: e.Profile, ClusterName: clusterName, GPUsByProduct: map[string]int{}, Scale: scale}
	env.OperatorVersion = e.operatorVersion(ctx)
	if dc, err := discovery.NewDiscoveryClientForConfig(e.Config); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			env.KubernetesVersion = v.GitVersion
		}
	}
	if tb := e.local(); tb != nil {
		// The version the testbed came up with ($GPULAB_VOLCANO_VERSION
		// or the default), as it recorded it.
		env.VolcanoVersion = tb.Versions().Volcano
	}
	// The suite gang-schedules through Volcano unless told otherwise.
	env.Scheduler, env.SchedulerVersion = results.SchedulerVolcano, env.VolcanoVersion
	env.Host = results.LocalHost()
	var nodes corev1.NodeList
	if err := e.Client.List(ctx, &nodes); err == nil {
		env.Nodes = len(nodes.Items)
		for _, n := range nodes.Items {
			if gpus := n.Status.Allocatable[gfd.GPUResource]; gpus.Value() > 0 {
				env.GPUsByProduct[n.Labels[gfd.Product]] += int(gpus.Value())
			}
		}
	}
	return env
}

// OperatorMetricsURL is the /metrics of the operator that reconciles the
// workload on the local profile: the gpulab leader for gpucluster, the
// testbed's KubeRay for raycluster. Elsewhere it is "" (--operator-metrics-url).
func (e *Environment) OperatorMetricsURL(ctx context.Context, workload string) (string, error) {
	tb := e.local()
	if tb == nil {
		return "", nil
	}
	switch workload {
	case "", "gpucluster":
		leader, err := e.Leader(ctx)
		if err != nil {
			return "", err
		}
		return leader.MetricsURL(), nil
	case "raycluster":
		s, err := tb.Status(ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("http://127.0.0.1:%d/metrics", s.Ports.KubeRayMetrics), nil
	}
	return "", nil
}
