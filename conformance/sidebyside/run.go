package sidebyside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// Options configures a side-by-side run.
type Options struct {
	// Scale is the gangs created at once per run (default 100).
	Scale int
	// Rounds is how many times each side runs, the order alternating
	// (default 2).
	Rounds int
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
	if o.Scale == 0 {
		o.Scale = 100
	}
	if o.Rounds == 0 {
		o.Rounds = 2
	}
	if o.TestbedName == "" {
		o.TestbedName = "gpulab-side-by-side"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	switch {
	case o.Scale < 1 || o.Rounds < 1:
		return fmt.Errorf("scale and rounds must be at least 1, got %d and %d", o.Scale, o.Rounds)
	case o.Suite == "" || o.Operator == "" || o.Out == "":
		return errors.New("the suite and operator binaries and an output directory are required")
	}
	return nil
}

// Run brings up one testbed with KubeRay, runs gpulab's operator beside
// it with the same reconcile concurrency and client limits, measures both
// with the suite's latency feature round by round, and writes report.md.
// It fails when a run fails or the two did not measure the same gangs.
func Run(ctx context.Context, opts Options) (string, error) {
	if err := opts.defaults(); err != nil {
		return "", err
	}
	fleet, err := profile.LocalFleet(profile.Options{Scale: opts.Scale})
	if err != nil {
		return "", err
	}
	tb, err := local.New(local.Options{Name: opts.TestbedName, Fleet: fleet, Log: opts.Log, ReadyTimeout: 5 * time.Minute,
		KubeRay: true, KubeRayReconcileConcurrency: profile.ReconcileConcurrency, KubeRayQPS: profile.OperatorQPS, KubeRayBurst: profile.OperatorBurst})
	if err != nil {
		return "", err
	}
	if err := tb.Up(ctx); err != nil {
		return "", errors.Join(err, tb.Down(context.WithoutCancel(ctx)))
	}
	defer func() { _ = tb.Down(context.WithoutCancel(ctx)) }()
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return "", err
	}
	op, err := profile.StartOperator(ctx, profile.OperatorOptions{Name: "gpulab-operator", Binary: opts.Operator,
		Kubeconfig: tb.Kubeconfig(), LogDir: opts.Out})
	if err != nil {
		return "", err
	}
	defer func() { _ = op.Stop() }()
	st, err := tb.Status(ctx)
	if err != nil {
		return "", err
	}
	metrics := map[string]string{
		"gpucluster": op.MetricsURL(),
		"raycluster": "http://127.0.0.1:" + strconv.Itoa(st.Ports.KubeRayMetrics) + "/metrics",
	}
	runs := map[string][]*results.Results{}
	for round := 1; round <= opts.Rounds; round++ {
		order := Workloads
		if round%2 == 0 {
			order = []string{Workloads[1], Workloads[0]}
		}
		for _, w := range order {
			out := filepath.Join(opts.Out, fmt.Sprintf("round-%d-%s", round, w))
			fmt.Fprintf(opts.Log, "side by side: round %d, %s, %d gangs\n", round, w, opts.Scale)
			cmd := profile.LatencyRun{Suite: opts.Suite, Kubeconfig: tb.Kubeconfig(), Workload: w, Scale: opts.Scale,
				OperatorMetricsURL: metrics[w], Out: out, ClusterName: opts.TestbedName}.Command(ctx)
			cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
			runErr := cmd.Run()
			r, err := results.Read(filepath.Join(out, "results.json"))
			if err != nil {
				return "", errors.Join(fmt.Errorf("round %d, %s: %w", round, w, runErr), err)
			}
			runs[w] = append(runs[w], r)
		}
	}
	rows := Rows(runs)
	report := fmt.Sprintf("# gpulab vs KubeRay, side by side\n\n%d gangs (1 head + 2 workers x 4 GPUs) created at once, %d rounds in alternating order, "+
		"on one local testbed of %d nodes; both operators at %d reconcile workers, client QPS %d / burst %d. Ranges are over the rounds; "+
		"the ratio is of the medians.\n\n%s", opts.Scale, opts.Rounds, len(fleet.Nodes()), profile.ReconcileConcurrency, profile.OperatorQPS, profile.OperatorBurst, Markdown(rows))
	if err := os.WriteFile(filepath.Join(opts.Out, "report.md"), []byte(report), 0o644); err != nil {
		return "", err
	}
	Print(opts.Log, rows)
	return report, CheckSameGangs(runs)
}
