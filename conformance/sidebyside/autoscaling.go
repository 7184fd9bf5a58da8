package sidebyside

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/autoscale"
	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/cli"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/local"
)

// DefaultAutoscalingTestbedName names the autoscaling comparison's testbed
// unless AutoscalingOptions say otherwise.
const DefaultAutoscalingTestbedName = "gpulab-autoscaling"

// DefaultAutoscalingWorkloads are every workload of the suite (--workload):
// the pairs the feature cannot run are reported as findings, with the
// suite's reason.
var DefaultAutoscalingWorkloads = []string{gpulabSide, floorSide, kuberay, "vcjob"}

// AutoscalingFleet is the testbed's own nodes: two DGX H100s outside
// Karpenter's NodePool, for the gangs' heads, as the feature's docs run it
// (docs/conformance/features.md). The NodePool's limit is two such nodes
// (profile.LocalAutoscalerMaxGPUs), what the feature's gangs are sized by.
const AutoscalingFleet = "dgx-h100=2"

// autoscalingFeature is the suite's --feature for every run.
const autoscalingFeature = "^autoscaling$"

// autoscalingRunTimeout is each run's --timeout: a stuck run ends FAILED
// with its results instead of holding the rounds for the suite's hour.
const autoscalingRunTimeout = 20 * time.Minute

// autoscalingReadyTimeout is each run's --ready-timeout: kwok's nodes come
// in seconds and a gang that scales up is Ready in under 5 s here, so a
// stack that holds its gang (Volcano's enqueue) is told within a minute,
// not the suite's default two.
const autoscalingReadyTimeout = time.Minute

// nodePoolDrainTimeout bounds the wait for the NodePool to be empty before
// a run: the previous run's nodes go once Karpenter consolidates them.
const nodePoolDrainTimeout = 5 * time.Minute

// AutoscalingOptions configures an autoscaling comparison.
type AutoscalingOptions struct {
	// Options are the binaries, the testbed's name (default
	// DefaultAutoscalingTestbedName) and the log; Out receives each run's
	// results, the operator's log and report.md.
	bench.Options
	// RoundOptions are the rounds each pair gets (default
	// bench.DefaultRounds; 1 checks that it runs, with no intervals) and
	// whether a warm-up round goes first.
	bench.RoundOptions
	// Workloads are the suite's workloads run on every stack (default
	// DefaultAutoscalingWorkloads).
	Workloads []string
	// VolcanoVersion is the Volcano stack's (default the testbed's:
	// $GPULAB_VOLCANO_VERSION, else binaries.DefaultVolcanoVersion).
	VolcanoVersion string
}

func (o *AutoscalingOptions) defaults() error {
	if len(o.Workloads) == 0 {
		o.Workloads = DefaultAutoscalingWorkloads
	}
	seen := map[string]bool{}
	for _, w := range o.Workloads {
		if !slices.Contains(DefaultAutoscalingWorkloads, w) {
			return fmt.Errorf("workload %q: want %s", w, strings.Join(DefaultAutoscalingWorkloads, ", "))
		}
		if seen[w] {
			return fmt.Errorf("workload %s is named twice", w)
		}
		seen[w] = true
	}
	v, err := binaries.ResolveVolcanoVersion(o.VolcanoVersion)
	if err != nil {
		return err
	}
	o.VolcanoVersion = v
	// One round is allowed here (bench.RoundOptions.Defaults wants two):
	// a check that every pair runs, its cells single values.
	if o.Rounds == 0 {
		o.Rounds = bench.DefaultRounds
	}
	if o.Rounds < 1 {
		return fmt.Errorf("rounds must be at least 1, got %d", o.Rounds)
	}
	return o.Options.Defaults(DefaultAutoscalingTestbedName)
}

// AutoscalingStack is a gang scheduler the feature runs on: the suite's
// --scheduler and a label.
type AutoscalingStack struct{ Scheduler, Label string }

// AutoscalingStacks are the stacks compared: Volcano (the reference) and
// Kubernetes' native gangs, on one testbed.
func AutoscalingStacks(volcanoVersion string) []AutoscalingStack {
	return []AutoscalingStack{{Scheduler: "volcano", Label: "Volcano " + volcanoVersion}, {Scheduler: nativeSide, Label: "Kubernetes gangs"}}
}

// AutoscalingPair is one stack and one workload: a side of the rounds.
type AutoscalingPair struct {
	Stack    AutoscalingStack
	Workload string
}

// Key names the pair's runs (round-<n>-<key>).
func (p AutoscalingPair) Key() string { return p.Stack.Scheduler + "-" + p.Workload }

// Label is the pair's row label.
func (p AutoscalingPair) Label() string { return p.Stack.Label + ", " + p.Workload }

// SuiteFlags are the suite's flags for the pair beyond bench's: the
// stack, the testbed's Karpenter and NodePool, and what the feature needs
// on --profile=cluster (--disruptive, a --max-new-nodes budget of the most
// a scale-up asks for).
func (p AutoscalingPair) SuiteFlags() []string {
	return []string{"--scheduler=" + p.Stack.Scheduler, "--autoscaler=karpenter", "--nodepool=" + local.KarpenterNodePool,
		"--disruptive", "--max-new-nodes=" + strconv.Itoa(autoscale.MaxScaleUp), "--timeout=" + autoscalingRunTimeout.String(),
		"--ready-timeout=" + autoscalingReadyTimeout.String()}
}

// AutoscalingPairs are every stack with every workload, in row order, and
// the pairs the suite refuses to run at all (its own flag validation,
// cli.ParseRun) with its reason: these are findings, never run.
func AutoscalingPairs(stacks []AutoscalingStack, workloads []string) (pairs []AutoscalingPair, refused map[string]string) {
	refused = map[string]string{}
	for _, s := range stacks {
		for _, w := range workloads {
			p := AutoscalingPair{Stack: s, Workload: w}
			args := append([]string{"--profile=cluster", "--workload=" + w, "--feature=" + autoscalingFeature}, p.SuiteFlags()...)
			if _, err := cli.ParseRun(args, io.Discard); err != nil {
				refused[p.Key()] = "the suite refuses it: " + err.Error()
			}
			pairs = append(pairs, p)
		}
	}
	return pairs, refused
}

// RunAutoscaling runs the suite's autoscaling feature (cluster_autoscaling)
// for every stack and workload on one local testbed with Karpenter's kwok
// provider: Volcano and Kubernetes' native gangs side by side (as
// compare-schedulers runs them), gpulab's operator beside them, KubeRay's
// when a workload needs it. Each pair runs once a round in rotating order,
// after an uncounted warm-up round; before each run the NodePool must be
// empty (a run beside the previous run's empty nodes counts them as free).
// A pair the suite refuses, or whose every assessment it skips for one
// reason, is a finding, not run again. report.md is written; it fails
// only where the harness did (a testbed, a run without results), not for
// what the feature found.
func RunAutoscaling(ctx context.Context, opts AutoscalingOptions) (string, error) {
	if err := opts.defaults(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return "", err
	}
	pairs, findings := AutoscalingPairs(AutoscalingStacks(opts.VolcanoVersion), opts.Workloads)
	fleet, err := local.ParseFleet(AutoscalingFleet)
	if err != nil {
		return "", err
	}
	bed, err := opts.Up(ctx, bench.BedOptions{Scale: 1, Operator: profile.OperatorOptions{LogDir: opts.Out},
		Testbed: local.Options{Fleet: fleet, ReadyTimeout: 5 * time.Minute, VolcanoVersion: opts.VolcanoVersion, NativeGangs: true,
			KubeRay: slices.Contains(opts.Workloads, kuberay), KubeRayReconcileConcurrency: profile.ReconcileConcurrency,
			KubeRayQPS: profile.OperatorQPS, KubeRayBurst: profile.OperatorBurst,
			Autoscaler: local.AutoscalerKarpenter, AutoscalerMaxGPUs: profile.LocalAutoscalerMaxGPUs(fleet)}})
	if err != nil {
		return "", err
	}
	defer func() { _ = bed.Down(ctx) }()
	c, err := bed.Testbed.Client()
	if err != nil {
		return "", err
	}
	metrics, err := autoscalingMetrics(ctx, bed, opts.Workloads)
	if err != nil {
		return "", err
	}
	var keys []string
	byKey := map[string]AutoscalingPair{}
	for _, p := range pairs {
		if _, refused := findings[p.Key()]; !refused {
			keys, byKey[p.Key()] = append(keys, p.Key()), p
		}
	}
	runs, err := opts.InRounds(keys, func(name, key string) (*results.Results, error) {
		if _, found := findings[key]; found {
			return nil, nil // the feature cannot run it: found once, not run again
		}
		p := byKey[key]
		fmt.Fprintf(opts.Log, "autoscaling side by side: %s\n", name)
		waited, err := waitNodePoolEmpty(ctx, c, nodePoolDrainTimeout)
		if err != nil {
			return nil, fmt.Errorf("%s: before the run, the NodePool %s did not empty: %w", name, local.KarpenterNodePool, err)
		}
		fmt.Fprintf(opts.Log, "NodePool %s empty (waited %.0f s)\n", local.KarpenterNodePool, waited.Seconds())
		run, err := bed.RunSuite(ctx, bench.SuiteRun{Workload: p.Workload, Features: autoscalingFeature, OperatorMetricsURL: metrics[p.Workload],
			Out: filepath.Join(opts.Out, name), Extra: p.SuiteFlags()})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if why, ok := FeatureNotRun(run.Results); ok {
			findings[key] = "the feature skips it: " + why
		}
		return run.Results, nil
	})
	if err != nil {
		return "", err
	}
	for key := range findings {
		delete(runs, key)
	}
	rep := AutoscalingReport{Pairs: pairs, Runs: runs, Findings: findings}
	report := fmt.Sprintf("# Cluster autoscaling side by side\n\n"+
		"The suite's `autoscaling` feature (cluster_autoscaling) for each stack and workload, on one local testbed: %s fleet nodes for the "+
		"gangs' heads, Karpenter %s's kwok provider with NodePool `%s` (limit %d GPUs) for their workers, gpulab's operator; Volcano and "+
		"Kubernetes' native gangs (scheduling.k8s.io PodGroups, kube-scheduler) side by side. %s%s "+
		"in rotating order; each run starts with the NodePool empty. Cells are the median (range) over the rounds that measured it; a ratio "+
		"is of the medians, with its 95%% bootstrap interval over the rounds. Host: %s.\n\n%s",
		AutoscalingFleet, binaries.KarpenterVersion, local.KarpenterNodePool, profile.LocalAutoscalerMaxGPUs(fleet), warmUp(opts.NoWarmUp), rounds(opts.Rounds),
		results.LocalHost(), rep.Markdown())
	fmt.Fprintf(opts.Log, "\nautoscaling side by side:\n")
	rep.Print(opts.Log)
	werr := os.WriteFile(filepath.Join(opts.Out, "report.md"), []byte(report), 0o644)
	return report, werr
}

// warmUp says whether an uncounted round went first.
func warmUp(skipped bool) string {
	if skipped {
		return "No warm-up round, "
	}
	return "A warm-up round (not counted), then "
}

// rounds is "1 round", "3 rounds".
func rounds(n int) string {
	if n == 1 {
		return "1 round"
	}
	return strconv.Itoa(n) + " rounds"
}

// autoscalingMetrics are the suite's --operator-metrics-url by workload:
// gpulab's operator for GPUClusters, the testbed's KubeRay for
// RayClusters (the suite checks its batch scheduler through it).
func autoscalingMetrics(ctx context.Context, bed *bench.Bed, workloads []string) (map[string]string, error) {
	m := map[string]string{gpulabSide: bed.Operator.MetricsURL()}
	if slices.Contains(workloads, kuberay) {
		st, err := bed.Testbed.Status(ctx)
		if err != nil {
			return nil, err
		}
		m[kuberay] = "http://127.0.0.1:" + strconv.Itoa(st.Ports.KubeRayMetrics) + "/metrics"
	}
	return m, nil
}

// waitNodePoolEmpty waits until Karpenter has no node and no NodeClaim
// left: a scale-up that starts beside empty nodes of the NodePool counts
// them as free, and Karpenter then added fewer nodes than the gang lacked
// (docs/conformance/features.md, the open finding of 2026-12-07).
func waitNodePoolEmpty(ctx context.Context, c client.Client, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	err := poll.Until(ctx, timeout, func() (bool, string) {
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes, client.HasLabels{karpenter.NodePoolLabel}); err != nil {
			return false, err.Error()
		}
		var claims unstructured.UnstructuredList
		claims.SetGroupVersionKind(karpenter.NodeClaimKind.GroupVersion().WithKind("NodeClaimList"))
		if err := c.List(ctx, &claims); err != nil {
			return false, err.Error()
		}
		return len(nodes.Items)+len(claims.Items) == 0, fmt.Sprintf("%d of Karpenter's nodes and %d NodeClaims left", len(nodes.Items), len(claims.Items))
	})
	return time.Since(start), err
}

// FeatureNotRun says whether the run could not run the autoscaling
// feature at all: every assessment skipped, all for one reason (the
// feature's own precheck, e.g. a workload it does not build), and that
// reason. A skip that differs between assessments (a NodePool without
// room for one of them) is the run's, not the pair's.
func FeatureNotRun(r *results.Results) (string, bool) {
	if r == nil {
		return "", false
	}
	for _, f := range r.Features {
		if f.Name != autoscalingFeatureName || len(f.Assessments) == 0 {
			continue
		}
		why := f.Assessments[0].Reason
		for _, a := range f.Assessments {
			if a.Status != results.StatusSkipped || a.Reason != why {
				return "", false
			}
		}
		return why, true
	}
	return "", false
}
