package sidebyside

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// DefaultScales are the gang counts the operators are compared at.
var DefaultScales = []int{100, 300}

// DefaultTestbedName names the operator comparison's testbed unless
// Options say otherwise.
const DefaultTestbedName = "gpulab-side-by-side"

// Options configures a side-by-side run.
type Options struct {
	// Options are the binaries, the testbed's name (default
	// DefaultTestbedName) and the log; Out receives each run's results,
	// the operators' logs and report.md.
	bench.Options
	// RoundOptions are the rounds each side gets per scale (default
	// bench.DefaultRounds) and whether a warm-up round goes first.
	bench.RoundOptions
	// Scales are the gang counts created at once, one testbed each
	// (default DefaultScales).
	Scales []int
	// Limits are what each operator runs at (ParseLimits; the zero value
	// is LimitsSame).
	Limits OperatorLimits
	// Identity is who gpulab's operator is to the API server, one of
	// bench.Identities (default bench.IdentityAdmin); KubeRay runs as the
	// testbed's admin.
	Identity string
}

func (o *Options) defaults() error {
	if len(o.Scales) == 0 {
		o.Scales = DefaultScales
	}
	if o.Limits.Mode == "" {
		o.Limits, _ = ParseLimits(LimitsSame)
	}
	return errors.Join(bench.CheckScales(o.Scales), bench.CheckIdentity(o.Identity), o.RoundOptions.Defaults(), o.Options.Defaults(DefaultTestbedName))
}

// Run measures, at each scale on a testbed of its own, the floor (the
// suite's bare gangs, no operator), gpulab's operator and KubeRay's at
// opts.Limits (by default both at gpulab's shipped limits), each side through the
// suite's latency feature, round by round in rotating order after an
// uncounted warm-up round, and writes report.md. It fails when a run
// fails or the sides did not measure the same gangs.
func Run(ctx context.Context, opts Options) (string, error) {
	if err := opts.defaults(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return "", err
	}
	var report strings.Builder
	fmt.Fprintf(&report, "# gpulab vs KubeRay vs the floor, side by side\n\n"+
		"Each scale: N gangs (1 head + 2 workers x 4 GPUs) created at once, on one local testbed; a warm-up round (each side once, not counted), "+
		"then %d rounds in rotating order. %s%s The floor is the suite's own "+
		"`--workload=bare` gangs: the objects gpulab's operator would create, made by an ideal operator (each gang's children the moment it exists, "+
		"all gangs at once, an unlimited client, one status write when its pods are Ready). burst_makespan is first create to last Ready. "+
		"Ranges are over the rounds; a ratio is of the medians, with its 95%% bootstrap interval over the rounds.\n", opts.Rounds,
		opts.Limits.describe(), describeIdentity(opts.Identity))
	var errs []error
	for _, n := range opts.Scales {
		runs, nodes, err := runScale(ctx, opts, n)
		if err != nil {
			return "", err
		}
		rows, cpu := Operators.Rows(runs.results), runs.cpu.markdown(Operators.Sides)
		fmt.Fprintf(&report, "\n## N=%d (%d nodes)\n\n%s", n, nodes, Operators.Markdown(rows))
		fmt.Fprintf(&report, "\nCPU seconds each process spent during a side's suite run (setup, burst, cleanup; both operators run on every side), range over the rounds:\n\n%s", cpu)
		fmt.Fprintf(opts.Log, "\nside by side, N=%d:\n", n)
		Operators.Print(opts.Log, rows)
		fmt.Fprintf(opts.Log, "\nCPU seconds per suite run, N=%d:\n%s", n, cpu)
		if err := Operators.CheckSameGangs(runs.results); err != nil {
			errs = append(errs, fmt.Errorf("at %d gangs: %w", n, err))
		}
	}
	if err := os.WriteFile(filepath.Join(opts.Out, "report.md"), []byte(report.String()), 0o644); err != nil {
		return "", err
	}
	return report.String(), errors.Join(errs...)
}

// runScale is one scale's testbed, with KubeRay beside gpulab's operator
// at opts.Limits, and its rounds.
func runScale(ctx context.Context, opts Options, n int) (scaleRuns, int, error) {
	out := filepath.Join(opts.Out, "n-"+strconv.Itoa(n))
	kr := opts.Limits.KubeRay
	bed, err := opts.Up(ctx, bench.BedOptions{Scale: n, Identity: opts.Identity,
		Operator: profile.OperatorOptions{LogDir: out, Args: opts.Limits.GPULab.operatorArgs()},
		Testbed: local.Options{ReadyTimeout: 5 * time.Minute, KubeRay: true, KubeRayReconcileConcurrency: kr.Workers,
			KubeRayQPS: kr.QPS, KubeRayBurst: kr.Burst}})
	if err != nil {
		return scaleRuns{}, 0, err
	}
	defer func() { _ = bed.Down(ctx) }()
	st, err := bed.Testbed.Status(ctx)
	if err != nil {
		return scaleRuns{}, 0, err
	}
	metrics := map[string]string{
		gpulabSide: bed.Operator.MetricsURL(),
		kuberay:    "http://127.0.0.1:" + strconv.Itoa(st.Ports.KubeRayMetrics) + "/metrics",
	}
	cpu := processCPU{}
	runs, err := opts.InRounds(Workloads, func(name, w string) (*results.Results, error) {
		fmt.Fprintf(opts.Log, "side by side: N=%d, %s, %s\n", n, strings.ReplaceAll(name, "-"+w, ""), w)
		run, err := bed.RunSuite(ctx, bench.SuiteRun{Workload: w, OperatorMetricsURL: metrics[w], Out: filepath.Join(out, name),
			CPU: bed.Processes()})
		if err != nil {
			return nil, fmt.Errorf("at %d gangs, %s: %w", n, name, err)
		}
		if !strings.HasPrefix(name, "warm-up") {
			cpu.add(w, run.CPUSeconds)
		}
		return run.Results, nil
	})
	return scaleRuns{results: runs, cpu: cpu}, bed.Nodes, err
}

// describeIdentity says, for the report, who gpulab's operator ran as when
// it was not the testbed's admin.
func describeIdentity(identity string) string {
	switch identity {
	case bench.IdentityServiceAccount:
		return " gpulab's operator runs as its shipped ServiceAccount and RBAC, in API Priority and Fairness's workload-low level (KubeRay as the admin, exempt)."
	case bench.IdentityServiceAccountAPF:
		return " gpulab's operator runs as its shipped ServiceAccount and RBAC, with the shipped priority level and FlowSchema (operator/config/apf; KubeRay as the admin, exempt)."
	}
	return ""
}
