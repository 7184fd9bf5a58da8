package sidebyside

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/local"
)

// DefaultSchedulersTestbedName prefixes the scheduler comparison's
// testbeds unless SchedulerOptions say otherwise.
const DefaultSchedulersTestbedName = "gpulab-schedulers"

// SchedulerOptions configures a scheduler comparison.
type SchedulerOptions struct {
	// Options are the binaries, the testbeds' name prefix (default
	// DefaultSchedulersTestbedName: one testbed per Volcano version, named
	// after it) and the log; Out receives each run's results, the
	// operators' logs and report.md.
	bench.Options
	// RoundOptions are the rounds each side gets (default
	// bench.DefaultRounds) and whether a warm-up round goes first.
	bench.RoundOptions
	// Scale is the gang count of each run (default 100).
	Scale int
	// VolcanoVersions are the Volcano sides (default
	// binaries.DefaultVolcanoVersion and v1.10.0). The first one's testbed
	// also serves Kubernetes' native gangs, the third side.
	VolcanoVersions []string
}

// Features are what each side runs every round: the gang feature's
// verdicts and the latency feature's phases.
const schedulerFeatures = "^(gang|latency)$"

func (o *SchedulerOptions) defaults() error {
	if o.Scale == 0 {
		o.Scale = 100
	}
	if len(o.VolcanoVersions) == 0 {
		o.VolcanoVersions = []string{binaries.DefaultVolcanoVersion, "v1.10.0"}
	}
	seen := map[string]bool{}
	for i, v := range o.VolcanoVersions {
		r, err := binaries.ResolveVolcanoVersion(v)
		if err != nil {
			return err
		}
		if seen[r] {
			return fmt.Errorf("volcano version %s is named twice", r)
		}
		seen[r], o.VolcanoVersions[i] = true, r
	}
	if o.Scale < 1 {
		return fmt.Errorf("the scale must be at least 1, got %d", o.Scale)
	}
	return errors.Join(o.RoundOptions.Defaults(), o.Options.Defaults(DefaultSchedulersTestbedName))
}

// Schedulers is the scheduler comparison's table for the Volcano versions
// (the first is the reference) and native gangs: where each gang's time
// goes (bound vs Ready), the worst partial binding, the operator's API
// cost and the scheduler's own CPU.
func Schedulers(volcanoVersions []string) Table {
	t := Table{
		Phases:      []string{"create_to_all_bound", "create_to_pods_ready", "create_to_status_ready"},
		Percentiles: []string{"p50", "p99"},
		Values:      []string{"overcommitted_create_to_all_bound", "longest_partial_binding", "api_requests_per_cluster", schedulerCPU},
	}
	for _, v := range volcanoVersions {
		t.Sides = append(t.Sides, Side{Key: volcanoSide(v), Label: "Volcano " + v})
	}
	t.Sides = append(t.Sides, Side{Key: nativeSide, Label: "Kubernetes gangs"})
	for _, s := range t.Sides[1:] {
		t.Ratios = append(t.Ratios, Ratio{Num: s.Key, Den: t.Sides[0].Key})
	}
	return t
}

// schedulerCPU is the CPU seconds the side's scheduler process used over
// the whole run (both features), read from /proc.
const schedulerCPU = "scheduler_cpu_per_run"

func volcanoSide(version string) string { return "volcano-" + version }

// schedulerSide is a side's bed (one for both sides of the first Volcano)
// and how the suite and /proc find its scheduler.
type schedulerSide struct {
	key, scheduler, process string
	bed                     *bench.Bed
}

// RunSchedulers measures the same gangs on each Volcano version and on
// Kubernetes' native gangs, through gpulab's operator: the suite's gang
// and latency features, round by round in rotating order after an
// uncounted warm-up round, and writes report.md. Volcano versions cannot
// share an API server (same CRD names, other schemas), so each gets a
// testbed of its own with the same fleet, all up at once so that every
// side runs on an equally loaded machine; native gangs run beside the
// first Volcano. It fails when a run fails or the sides did not measure
// the same gangs; the report is written either way.
func RunSchedulers(ctx context.Context, opts SchedulerOptions) (string, error) {
	if err := opts.defaults(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return "", err
	}
	var sides []schedulerSide
	nodes := 0
	for i, v := range opts.VolcanoVersions {
		name := opts.TestbedName + "-" + strings.NewReplacer(".", "-", "+", "-").Replace(strings.TrimPrefix(v, "v"))
		bed, err := opts.Up(ctx, bench.BedOptions{Scale: opts.Scale, Operator: profile.OperatorOptions{Name: "gpulab-operator-" + name, LogDir: opts.Out},
			Testbed: local.Options{Name: name, ReadyTimeout: 5 * time.Minute, VolcanoVersion: v, NativeGangs: i == 0}})
		if err != nil {
			return "", err
		}
		defer func() { _ = bed.Down(ctx) }()
		nodes = bed.Nodes
		sides = append(sides, schedulerSide{key: volcanoSide(v), scheduler: "volcano", process: "vc-scheduler", bed: bed})
		if i == 0 {
			sides = append(sides, schedulerSide{key: nativeSide, scheduler: "kubernetes", process: "kube-scheduler", bed: bed})
		}
	}
	keys := make([]string, len(sides))
	byKey := map[string]schedulerSide{}
	for i, s := range sides {
		keys[i], byKey[s.key] = s.key, s
	}
	runs, err := opts.InRounds(keys, func(name, key string) (*results.Results, error) {
		r, err := runSchedulerSide(ctx, opts, byKey[key], filepath.Join(opts.Out, name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return r, nil
	})
	if err != nil {
		return "", err
	}
	table := Schedulers(opts.VolcanoVersions)
	rows := table.Rows(runs)
	report := fmt.Sprintf("# Gang schedulers side by side\n\n"+
		"N=%d gangs (1 head + 2 workers x 4 GPUs) through gpulab's operator, on %d fake nodes; each side runs the suite's gang and latency "+
		"features once a round, a warm-up round (not counted), then %d rounds in rotating order. Ranges are over the rounds; a ratio is of "+
		"the medians, with its 95%% bootstrap interval over the rounds. Kubernetes gangs are scheduling.k8s.io PodGroups placed "+
		"by kube-scheduler's gangscheduling plugin, on the first Volcano's testbed. Host: %s.\n\n%s\n## Verdicts\n\n%s",
		opts.Scale, nodes, opts.Rounds, results.LocalHost(), table.Markdown(rows), verdicts(table, runs))
	fmt.Fprintf(opts.Log, "\nschedulers side by side, N=%d:\n", opts.Scale)
	table.Print(opts.Log, rows)
	fmt.Fprint(opts.Log, "\n", verdicts(table, runs))
	werr := os.WriteFile(filepath.Join(opts.Out, "report.md"), []byte(report), 0o644)
	return report, errors.Join(werr, table.CheckSameGangs(runs))
}

// runSchedulerSide is one run of the suite on side, with the scheduler's
// CPU over it recorded as a latency measurement.
func runSchedulerSide(ctx context.Context, opts SchedulerOptions, side schedulerSide, dir string) (*results.Results, error) {
	fmt.Fprintf(opts.Log, "schedulers side by side: %s\n", filepath.Base(dir))
	pid := side.bed.Processes()[side.process]
	if _, ok := bench.ProcessCPU(pid); !ok {
		return nil, fmt.Errorf("the testbed's %s is not running", side.process)
	}
	run, err := side.bed.RunSuite(ctx, bench.SuiteRun{Features: schedulerFeatures, OperatorMetricsURL: side.bed.Operator.MetricsURL(), Out: dir,
		Extra: []string{"--scheduler=" + side.scheduler}, CPU: map[string]int{side.process: pid}})
	if err != nil {
		return nil, err
	}
	if cpu, ok := run.CPUSeconds[side.process]; ok {
		run.Results.Measurements = append(run.Results.Measurements, results.Value("latency", schedulerCPU, "seconds", cpu))
	}
	return run.Results, nil
}

// verdicts is a Markdown table of each feature's verdicts per side over
// the rounds, e.g. "passed 3/3", with the first failure's reason.
func verdicts(t Table, runs map[string][]*results.Results) string {
	var b strings.Builder
	h := []string{"feature"}
	for _, s := range t.Sides {
		h = append(h, s.Label)
	}
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, f := range []string{"gang", "latency"} {
		row := []string{f}
		for _, s := range t.Sides {
			count, first := map[string]int{}, ""
			for _, r := range runs[s.Key] {
				for _, feat := range r.Features {
					if feat.Name != f {
						continue
					}
					v := string(feat.Status)
					count[v]++
					if msgs := feat.Messages(); first == "" && len(msgs) > 0 {
						first = msgs[0]
					}
				}
			}
			var parts []string
			for v, n := range count {
				parts = append(parts, fmt.Sprintf("%s %d/%d", v, n, len(runs[s.Key])))
			}
			sort.Strings(parts)
			cell := strings.Join(parts, ", ")
			if first != "" {
				cell += " (" + strings.ReplaceAll(first, "|", "/") + ")"
			}
			row = append(row, cell)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
	}
	return b.String()
}
