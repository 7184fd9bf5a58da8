package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/conformance/runlock"
	"github.com/gpulab/gpulab/internal/draclass"
	"github.com/gpulab/gpulab/testbeds/local"
)

// RunOptions is what `gpulab-conformance run` was asked to do, validated.
// The zero value is not useful: ParseRun fills the defaults documented on
// each flag.
type RunOptions struct {
	// Cluster.
	Profile           string // local, kind or cluster
	Kubeconfig        string // cluster: default $KUBECONFIG, ~/.kube/config, then in-cluster
	Context           string // kubeconfig context; default its current one
	OperatorNamespace string // where gpulab's operator runs on kind and cluster
	ClientQPS         int    // the suite's own API client on a cluster (burst twice that)
	// The cluster's run lock (conformance/runlock): LockNamespace holds it
	// and the run's marker, LockWait bounds the wait for another run's,
	// AllowConcurrent skips it (the results then say so).
	LockNamespace   string
	LockWait        time.Duration
	AllowConcurrent bool

	// Footprint.
	MaxGPUs      footprint.Budget
	Queue        string            // a Volcano queue to use; default one the run creates with capability = MaxGPUs
	NodeSelector map[string]string // nodes the run may use, besides advertising nvidia.com/gpu
	Namespace    string            // one namespace for everything; default a namespace per scenario, created and deleted
	Image        string            // image of the workload pods
	SubmitImage  string            // image of GPUJob submitters: it must exit 0 by itself
	DryRun       bool
	// Disruptive allows what reaches past the run's own objects (killing
	// the operator's leader); default on for local and kind, whose
	// clusters the run made, off on a cluster.
	Disruptive bool

	// What to test.
	Workload string // gpucluster, raycluster, vcjob or bare
	// Scheduler gang-schedules the gpucluster workload: volcano, or
	// kubernetes (kube-scheduler's own gangs, scheduling.k8s.io PodGroups).
	Scheduler string
	// DeviceClass is the DRA DeviceClass of GPUs the dra feature claims
	// from: gpulab's agent's, or NVIDIA's gpu.nvidia.com.
	DeviceClass string
	// GPUAllocation is how the gangs ask for GPUs: extended-resource
	// (nvidia.com/gpu) or dra (a claim per pod for DeviceClass).
	GPUAllocation                              string
	Features, SkipFeatures, Assess, SkipAssess string
	Scale                                      int
	WaitWindow, ReadyTimeout                   time.Duration
	PrometheusURL                              string
	OperatorMetricsURL                         string
	RealGPUs                                   bool
	ProbeImage                                 string
	RuntimeClass                               string
	// VolcanoNamespace holds Volcano's scheduler ConfigMap.
	VolcanoNamespace string

	// Autoscaler is the cluster's node autoscaler, for the autoscaling
	// feature: auto (Karpenter where its NodePools are served, else none;
	// the suite resolves it at setup), karpenter, cluster-autoscaler or
	// none. On the local profile karpenter starts the testbed with
	// Karpenter; auto there is none.
	Autoscaler string
	// NodePool is the Karpenter NodePool the autoscaling feature grows
	// (default: the only one with an nvidia.com/gpu limit; on local the
	// testbed's).
	NodePool string
	// MaxNewNodes is the most nodes the autoscaling feature may make a
	// cluster add at once (--profile=cluster; 0 refuses the feature).
	MaxNewNodes int
	// MaxExtraNodes is how many nodes beyond a gang's need a scale-up may
	// add before it fails (default 0).
	MaxExtraNodes int

	// Requirements is --requirements (requirements.go); nil asks for all.
	Requirements requirementsValue

	// PrometheusBearerTokenFile holds the token sent to PrometheusURL (read
	// again on every request); PrometheusCAFile the PEM CAs its
	// certificate is checked against instead of the system roots.
	PrometheusBearerTokenFile string
	PrometheusCAFile          string

	// Local profile.
	Fleet          local.Fleet
	TestbedName    string
	OperatorBinary string
	Keep           bool

	// Output.
	Out            string
	PerfData       string // also clusterloader2 PerfData files here (absolute; empty: none)
	PushgatewayURL string
	// PushBaseline names baseline runs whose range is pushed with the run.
	PushBaseline string
	ClusterName  string
	Verbose      bool
	// Timeout is the suite's own deadline (Deadline): the run then stops,
	// cleans up, writes its results and ends FAILED.
	Timeout time.Duration
	// ResultsConfigMap is NAMESPACE/NAME of a ConfigMap the output is also
	// stored in (incluster.Store): the in-cluster runner's, for retrieve.
	ResultsConfigMap string

	// RunID labels everything the run creates, so cleanup finds it all.
	RunID string
	// TestArgs are the flags for Go's testing package: -test.* flags
	// passed through (go test adds them), -test.v for Verbose, and a
	// -test.timeout backstop BackstopGrace after Timeout.
	TestArgs []string
}

// Defaults of the images; every one can be replaced for clusters that
// pull from a mirror.
const (
	DefaultImage       = "registry.k8s.io/pause:3.10"
	DefaultSubmitImage = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
	DefaultProbeImage  = "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04"
)

// runFlag is one flag of `run`, in its help group.
type runFlag struct {
	group, name, usage string
	value              flag.Value
}

var errHelp = errors.New("help")

var groups = []string{"cluster", "footprint", "what to test", "local profile", "output"}

func runFlags(o *RunOptions) []runFlag {
	str := func(p *string, def string) flag.Value { *p = def; return (*stringValue)(p) }
	dur := func(p *time.Duration, def time.Duration) flag.Value { *p = def; return (*durationValue)(p) }
	boolean := func(p *bool) flag.Value { return (*boolValue)(p) }
	return []runFlag{
		{"cluster", "profile", "local (a fresh local testbed), kind (a kind cluster; Docker) or cluster (an existing one)", str(&o.Profile, "local")},
		{"cluster", "kubeconfig", "cluster profile: kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)", str(&o.Kubeconfig, "")},
		{"cluster", "context", "cluster profile: kubeconfig context (default its current context)", str(&o.Context, "")},
		{"cluster", "operator-namespace", "kind, cluster: namespace of gpulab's operator (leader Lease, pods)", str(&o.OperatorNamespace, "gpulab-system")},
		{"cluster", "volcano-namespace", "kind, cluster: where Volcano's scheduler configuration is read (reclaim or preempt on: over-capacity scenarios need --disruptive)", str(&o.VolcanoNamespace, "volcano-system")},
		{"cluster", "lock-wait", "how long to wait for the run holding the cluster's run lock to end; then fail, naming it", dur(&o.LockWait, runlock.DefaultWait)},
		{"cluster", "lock-namespace", "namespace of the cluster's run lock and the runs' markers (Leases); every run on a cluster must use the same", str(&o.LockNamespace, runlock.DefaultNamespace)},
		{"cluster", "allow-concurrent", "run without the cluster's run lock, beside other runs (their load counts in this run's measurements; the report warns)", boolean(&o.AllowConcurrent)},
		{"cluster", "client-qps", "cluster: the suite's API requests per second (burst twice that); gangs are created at this rate", (*intValue)(setInt(&o.ClientQPS, 50))},
		{"footprint", "max-gpus", fmt.Sprintf("GPUs the run may hold at once, or all (default all on local, %d on kind and cluster)", footprint.DefaultClusterBudget), &o.MaxGPUs},
		{"footprint", "queue", "Volcano queue for every gang (default: one the run creates, capability = --max-gpus)", str(&o.Queue, "")},
		{"footprint", "node-selector", "only nodes with these labels, key=value,... (GPU nodes always)", (*selectorValue)(&o.NodeSelector)},
		{"footprint", "namespace", "put everything in this existing namespace (default: a namespace per scenario, removed after)", str(&o.Namespace, "")},
		{"footprint", "image", "image of the workload pods", str(&o.Image, DefaultImage)},
		{"footprint", "submitter-image", "image of GPUJob submitters (runs `sleep 2`; must exit 0)", str(&o.SubmitImage, DefaultSubmitImage)},
		{"footprint", "dry-run", "print the plan (features, gangs, GPUs, nodes, disruptive actions) and create nothing", boolean(&o.DryRun)},
		{"footprint", "disruptive", "allow actions beyond the run's own objects: force-deleting the operator's leader pod (default on for local and kind, off for cluster)", boolean(&o.Disruptive)},
		{"what to test", "scheduler", "who gang-schedules the gpucluster workload: volcano (Volcano PodGroups) or kubernetes (kube-scheduler's own gang scheduling, scheduling.k8s.io PodGroups; the local testbed then turns the GenericWorkload gate on)", str(&o.Scheduler, "volcano")},
		{"what to test", "device-class", "DeviceClass of GPUs the dra feature claims (Dynamic Resource Allocation): gpu.gpulab.io (gpulab's agent) or gpu.nvidia.com (NVIDIA's DRA driver)", str(&o.DeviceClass, draclass.DriverName)},
		{"what to test", "gpu-allocation", "how the gangs ask for their GPUs: extended-resource (nvidia.com/gpu) or dra (each pod claims its GPUs from --device-class through Dynamic Resource Allocation; --workload=gpucluster)", str(&o.GPUAllocation, "extended-resource")},
		{"what to test", "workload", "the gangs to measure: gpucluster (gpulab), raycluster (KubeRay), vcjob (Volcano Job) or bare (the suite creates what gpulab's operator would, with no operator: the floor)", str(&o.Workload, "gpucluster")},
		{"what to test", "feature", "only features matching this regexp (latency, gang, controller, inventory, job, accelerators, dra, autoscaling)", str(&o.Features, "")},
		{"what to test", "skip-feature", "skip features matching this regexp", str(&o.SkipFeatures, "")},
		{"what to test", "assess", "only assessments matching this regexp", str(&o.Assess, "")},
		{"what to test", "skip-assess", "skip assessments matching this regexp", str(&o.SkipAssess, "")},
		{"what to test", "requirements", requirementsUsage, &o.Requirements},
		{"what to test", "autoscaler", "the cluster's node autoscaler, for the autoscaling feature: auto (Karpenter where its NodePools are served, else none), karpenter, cluster-autoscaler or none (the feature is skipped, saying so); on --profile=local, karpenter starts the testbed with Karpenter", str(&o.Autoscaler, "auto")},
		{"what to test", "nodepool", "autoscaling: the Karpenter NodePool to grow (default: the only one with an nvidia.com/gpu limit; local: the testbed's)", str(&o.NodePool, "")},
		{"what to test", "max-new-nodes", "autoscaling on --profile=cluster: the most nodes the run may have the autoscaler add (default 0: the feature is refused; it also needs --disruptive)", (*intValue)(setInt(&o.MaxNewNodes, 0))},
		{"what to test", "max-extra-nodes", "autoscaling: nodes a scale-up may add beyond what the gang lacks before it fails", (*intValue)(setInt(&o.MaxExtraNodes, 0))},
		{"what to test", "scale", "latency: clusters created at once (1 head + 2 workers x 4 GPUs); sizes the local fleet", (*intValue)(setInt(&o.Scale, 100))},
		{"what to test", "wait-window", "how long a gang that cannot fit is watched for bound pods", dur(&o.WaitWindow, 10*time.Second)},
		{"what to test", "ready-timeout", "how long a gang that fits may take to be Ready", dur(&o.ReadyTimeout, 2*time.Minute)},
		{"what to test", "prometheus-url", "per-GPU series from this Prometheus (gpulab_gpu_* or DCGM_FI_DEV_*) instead of the local agent", str(&o.PrometheusURL, "")},
		{"what to test", "prometheus-bearer-token-file", "--prometheus-url: send the token in this file (re-read per request) as a bearer token", str(&o.PrometheusBearerTokenFile, "")},
		{"what to test", "prometheus-ca-file", "--prometheus-url: check its certificate against these PEM CAs, not the system's", str(&o.PrometheusCAFile, "")},
		{"what to test", "operator-metrics-url", "the workload operator's /metrics, for the work per gang (local: found by itself)", str(&o.OperatorMetricsURL, "")},
		{"what to test", "real-gpus", "kind, cluster: run nvidia-smi in pods and check GPUs, UUIDs and isolation", boolean(&o.RealGPUs)},
		{"what to test", "probe-image", "image with nvidia-smi, sh and sleep for --real-gpus", str(&o.ProbeImage, DefaultProbeImage)},
		{"what to test", "runtime-class", "--real-gpus: runtimeClassName of the probe pods (e.g. nvidia, where it is not the nodes' default runtime)", str(&o.RuntimeClass, "")},
		{"local profile", "fleet", "fake GPU nodes as profile=count,... (default --scale+--scale/4+3 dgx-h100)", (*fleetValue)(&o.Fleet)},
		{"local profile", "testbed-name", "name of the testbed it creates", str(&o.TestbedName, "gpulab-conformance")},
		{"local profile", "operator-binary", "gpulab-operator to run (default: build it)", str(&o.OperatorBinary, "")},
		{"local profile", "keep", "leave the testbed running afterwards", boolean(&o.Keep)},
		{"output", "out", "directory for results.json, junit.xml, report.md/html and logs", str(&o.Out, "_artifacts/conformance")},
		{"output", "perfdata", perfDataUsage, str(&o.PerfData, "")},
		{"output", "pushgateway-url", "push verdicts and measurements to this Prometheus Pushgateway", str(&o.PushgatewayURL, "")},
		{"output", "push-baseline", pushBaselineUsage, str(&o.PushBaseline, "")},
		{"output", "cluster-name", "names the cluster in results and the push grouping (default: the testbed or context name)", str(&o.ClusterName, "")},
		{"output", "verbose", "print every assessment's log, not only failures'", boolean(&o.Verbose)},
		{"output", "timeout", "stop the run after this long: it cleans up, writes its results and ends FAILED", dur(&o.Timeout, time.Hour)},
		{"output", "run-id", "name the run (its label value) instead of a new id; submit passes the one it chose", str(&o.RunID, "")},
		{"output", "results-configmap", "also store the output, packed, in this NAMESPACE/NAME ConfigMap (the in-cluster runner's; retrieve reads it)", str(&o.ResultsConfigMap, "")},
	}
}

// pushBaselineUsage describes --push-baseline, shared by run and median.
const pushBaselineUsage = "with --pushgateway-url: also push the range of these baseline runs (`PATH`: results.json or a directory of runs), the dashboard's band"

func setInt(p *int, def int) *int { *p = def; return p }

// ParseRun parses and validates `run`'s flags. -test.* flags pass through
// to TestArgs untouched.
func ParseRun(args []string, stderr io.Writer) (*RunOptions, error) {
	o := &RunOptions{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range runFlags(o) {
		fs.Var(f.value, f.name, f.usage)
	}
	own, testArgs := splitTestArgs(args)
	if err := parseFlags(fs, own); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := o.validate(set); err != nil {
		return nil, err
	}
	o.TestArgs = testArgs
	if o.Verbose {
		o.TestArgs = append(o.TestArgs, "-test.v")
	}
	if !hasTestFlag(testArgs, "timeout") {
		o.TestArgs = append(o.TestArgs, "-test.timeout="+(o.Timeout+BackstopGrace).String())
	}
	if o.RunID == "" {
		o.RunID = newRunID(time.Now())
	}
	return o, nil
}

// splitTestArgs separates Go testing's -test.* flags (as `go test` passes
// them, or a user debugging the suite) from run's own.
func splitTestArgs(args []string) (own, test []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || !strings.HasPrefix(name, "test.") {
			own = append(own, a)
			continue
		}
		test = append(test, "-"+name)
		// -test.timeout 40m: a value flag given its value separately.
		if !strings.Contains(name, "=") && !testBoolFlags[strings.TrimPrefix(name, "test.")] && i+1 < len(args) {
			i++
			test = append(test, args[i])
		}
	}
	return own, test
}

var testBoolFlags = map[string]bool{"v": true, "short": true, "failfast": true, "paniconexit0": true, "fullpath": true}

func hasTestFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "-test."+name || strings.HasPrefix(a, "-test."+name+"=") {
			return true
		}
	}
	return false
}

// newRunID is short, sortable and unique enough for one cluster: a label
// value and a namespace suffix.
func newRunID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return now.UTC().Format("0102-150405") + "-" + hex.EncodeToString(b)
}

func printRunFlags(w io.Writer) {
	flags := runFlags(&RunOptions{})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, g := range groups {
		fmt.Fprintf(tw, "  %s:\t\n", g)
		for _, f := range flags {
			if f.group != g {
				continue
			}
			usage := f.usage
			if def := f.value.String(); def != "" && def != "false" && !strings.Contains(usage, "default") {
				usage += " (default " + def + ")"
			}
			fmt.Fprintf(tw, "    --%s\t%s\n", f.name, usage)
		}
	}
	_ = tw.Flush()
}

// Flag values, so every flag lives in one table with its group.
type (
	stringValue   string
	durationValue time.Duration
	boolValue     bool
	intValue      int
	fleetValue    local.Fleet
	selectorValue map[string]string
)

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *durationValue) String() string   { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	*v = durationValue(d)
	return err
}
func (v *boolValue) String() string { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	*v = boolValue(b)
	return err
}
func (v *boolValue) IsBoolFlag() bool { return true }
func (v *intValue) String() string    { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	*v = intValue(n)
	return err
}
func (v *fleetValue) String() string { return "" }
func (v *fleetValue) Set(s string) error {
	f, err := local.ParseFleet(s)
	*v = fleetValue(f)
	return err
}
func (v *selectorValue) String() string { return "" }
func (v *selectorValue) Set(s string) error {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return fmt.Errorf("%q is not key=value", pair)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
			return fmt.Errorf("label value %q: %s", val, strings.Join(errs, "; "))
		}
		m[k] = val
	}
	*v = m
	return nil
}

// parseFlags parses args into fs: errHelp for -h, else the flag
// package's error in the help's spelling (it says "flag -x"; the help
// spells them --x).
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return errHelp
	}
	return errors.New(strings.Replace(err.Error(), " flag -", " --", 1))
}

// Ask is what the run asks to evidence, from its options: the run's
// verdict and --dry-run's requirements table read the same.
func (o *RunOptions) Ask() results.Ask {
	return results.Ask{
		Filtered: o.Features != "" || o.SkipFeatures != "" || o.Assess != "" || o.SkipAssess != "",
		MockGPUs: o.Profile != "cluster", RealGPUs: o.RealGPUs, NoDRA: o.Profile == "kind", Requirements: o.Requirements,
		NoAutoscaler: o.NoAutoscaler(),
	}
}
