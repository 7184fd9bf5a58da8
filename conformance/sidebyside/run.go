package sidebyside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// Options configures a side-by-side run.
type Options struct {
	// Scales are the gang counts created at once, one testbed each
	// (default 100 and 300).
	Scales []int
	// Rounds is how many counted runs each side gets per scale, the order
	// rotating from round to round (default 3).
	Rounds int
	// NoWarmUp skips the uncounted first round (each side once) that
	// warms the testbed's caches and the operators' informers.
	NoWarmUp bool
	// Suite and Operator are the gpulab-conformance and gpulab-operator
	// binaries.
	Suite, Operator string
	// Out receives each run's results, the operators' logs and report.md.
	Out string
	// TestbedName names the testbed (default gpulab-side-by-side).
	TestbedName string
	// Log receives progress and each run's output.
	Log io.Writer
}

func (o *Options) defaults() error {
	if len(o.Scales) == 0 {
		o.Scales = []int{100, 300}
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.TestbedName == "" {
		o.TestbedName = "gpulab-side-by-side"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, n := range o.Scales {
		if n < 1 {
			return fmt.Errorf("every scale must be at least 1, got %d", n)
		}
	}
	switch {
	case o.Rounds < 2:
		return fmt.Errorf("rounds must be at least 2 (an interval needs two runs a side), got %d", o.Rounds)
	case o.Suite == "" || o.Operator == "" || o.Out == "":
		return errors.New("the suite and operator binaries and an output directory are required")
	}
	return nil
}

// Run measures, at each scale on a testbed of its own, the floor (the
// suite's bare gangs, no operator), gpulab's operator and KubeRay's with
// the same reconcile concurrency and client limits, each side through the
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
		"then %d rounds in rotating order. Both operators run at %d reconcile workers, client QPS %d / burst %d; the floor is the suite's own "+
		"`--workload=bare` gangs: the objects gpulab's operator would create, made by an ideal operator (each gang's children the moment it exists, "+
		"all gangs at once, an unlimited client, one status write when its pods are Ready). burst_makespan is first create to last Ready. "+
		"Ranges are over the rounds; a ratio is of the medians, with its 95%% bootstrap interval over the rounds.\n", opts.Rounds,
		profile.ReconcileConcurrency, profile.OperatorQPS, profile.OperatorBurst)
	var errs []error
	for _, n := range opts.Scales {
		runs, nodes, err := runScale(ctx, opts, n)
		if err != nil {
			return "", err
		}
		rows := Operators.Rows(runs)
		fmt.Fprintf(&report, "\n## N=%d (%d nodes)\n\n%s", n, nodes, Operators.Markdown(rows))
		fmt.Fprintf(opts.Log, "\nside by side, N=%d:\n", n)
		Operators.Print(opts.Log, rows)
		if err := Operators.CheckSameGangs(runs); err != nil {
			errs = append(errs, fmt.Errorf("at %d gangs: %w", n, err))
		}
	}
	if err := os.WriteFile(filepath.Join(opts.Out, "report.md"), []byte(report.String()), 0o644); err != nil {
		return "", err
	}
	return report.String(), errors.Join(errs...)
}

// runScale is one scale's testbed and rounds.
func runScale(ctx context.Context, opts Options, n int) (map[string][]*results.Results, int, error) {
	fleet, err := profile.LocalFleet(profile.Options{Scale: n})
	if err != nil {
		return nil, 0, err
	}
	tb, err := local.New(local.Options{Name: opts.TestbedName, Fleet: fleet, Log: opts.Log, ReadyTimeout: 5 * time.Minute,
		KubeRay: true, KubeRayReconcileConcurrency: profile.ReconcileConcurrency, KubeRayQPS: profile.OperatorQPS, KubeRayBurst: profile.OperatorBurst})
	if err != nil {
		return nil, 0, err
	}
	if err := tb.Up(ctx); err != nil {
		return nil, 0, errors.Join(err, tb.Down(context.WithoutCancel(ctx)))
	}
	defer func() { _ = tb.Down(context.WithoutCancel(ctx)) }()
	out := filepath.Join(opts.Out, "n-"+strconv.Itoa(n))
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, 0, err
	}
	op, err := profile.StartOperator(ctx, profile.OperatorOptions{Name: "gpulab-operator", Binary: opts.Operator,
		Kubeconfig: tb.Kubeconfig(), LogDir: out, SoleReplica: true})
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = op.Stop() }()
	st, err := tb.Status(ctx)
	if err != nil {
		return nil, 0, err
	}
	metrics := map[string]string{
		"gpucluster": op.MetricsURL(),
		"raycluster": "http://127.0.0.1:" + strconv.Itoa(st.Ports.KubeRayMetrics) + "/metrics",
	}
	runs, err := inRounds(opts.Rounds, opts.NoWarmUp, Workloads, func(name, w string) (*results.Results, error) {
		if err := op.Exited(); err != nil {
			return nil, fmt.Errorf("at %d gangs, before %s: %w", n, name, err)
		}
		dir := filepath.Join(out, name)
		fmt.Fprintf(opts.Log, "side by side: N=%d, %s, %s\n", n, strings.ReplaceAll(name, "-"+w, ""), w)
		cmd := profile.LatencyRun{Suite: opts.Suite, Kubeconfig: tb.Kubeconfig(), Workload: w, Scale: n,
			OperatorMetricsURL: metrics[w], Out: dir, ClusterName: opts.TestbedName}.Command(ctx)
		cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
		runErr := cmd.Run()
		r, err := results.Read(filepath.Join(dir, "results.json"))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("at %d gangs, %s: %w", n, name, runErr), err)
		}
		return r, nil
	})
	return runs, len(fleet.Nodes()), err
}

// inRounds runs every side once a round, in Order, after an uncounted
// warm-up round unless noWarmUp; run names each run "warm-up-<side>" or
// "round-<n>-<side>". It returns the counted runs by side.
func inRounds(rounds int, noWarmUp bool, sides []string, run func(name, side string) (*results.Results, error)) (map[string][]*results.Results, error) {
	runs := map[string][]*results.Results{}
	first := 0 // round 0 is the warm-up
	if noWarmUp {
		first = 1
	}
	for round := first; round <= rounds; round++ {
		for _, side := range Order(round, sides) {
			name := fmt.Sprintf("round-%d-%s", round, side)
			if round == 0 {
				name = "warm-up-" + side
			}
			r, err := run(name, side)
			if err != nil {
				return nil, err
			}
			if round > 0 {
				runs[side] = append(runs[side], r)
			}
		}
	}
	return runs, nil
}

// Order is round's order of the sides: rotated by one each round, so each
// side goes first, in the middle and last equally often over the rounds.
func Order(round int, sides []string) []string {
	k := round % len(sides)
	return append(append([]string(nil), sides[k:]...), sides[:k]...)
}
