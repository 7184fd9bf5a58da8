package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/gpulab/gpulab/conformance/results"
)

// The nightly's exit codes. Make, CI and the CronJob read them alike.
const (
	// NightlyPassed: nothing regressed, or the first night recorded the
	// baseline.
	NightlyPassed = results.ExitPassed
	// NightlyFailed: a regression, a failed feature, or a run that failed.
	NightlyFailed = results.ExitFailed
	// NightlyCannotCompare: the night decided nothing: bad usage, no
	// baseline where one may not be recorded, a baseline it cannot read,
	// or one from another host class or cluster.
	NightlyCannotCompare = results.ExitUsage
	// NightlyPartial: a run was PARTIAL and --allow-partial was not given.
	NightlyPartial = results.ExitPartial
)

const nightlyUsage = "gpulab-conformance nightly --baseline BASELINE [flags] [-- RUN FLAGS]\n" +
	"  runs the suite --runs times (each `run` with the flags after --), merges the runs (median), pushes the median,\n" +
	"  compares the runs with the baseline runs (compare's test) and exits 0 nothing regressed (or the first night recorded\n" +
	"  the baseline), 1 a regression or a failed run, 2 cannot compare, 3 a partial run (--allow-partial allows it)\n" +
	"  BASELINE: a directory (a baseline set) or configmap:NAMESPACE/NAME (a set kept in the cluster the runs measure)"

// nightlyOptions is what `gpulab-conformance nightly` was asked.
type nightlyOptions struct {
	Runs int
	// Out holds run-<i>/ per run, median/ and, for a ConfigMap baseline,
	// baseline/ (the set compared with).
	Out      string
	Baseline string
	// AllowPartial lets PARTIAL runs pass (and be recorded).
	AllowPartial bool
	// RecordFirst records the night as the baseline when there is none.
	RecordFirst    bool
	Suite          string // the gpulab-conformance binary the runs execute
	PushgatewayURL string
	PerfData       string
	Compare        results.CompareOptions
	// RunArgs are passed to every run; Run is them parsed (its profile,
	// kubeconfig and cluster name).
	RunArgs []string
	Run     *RunOptions
}

// nightlyOwnRunFlags are run flags the nightly sets itself, per run or
// for the night: given after -- they would collide.
var nightlyOwnRunFlags = map[string]string{
	"out":               "each run writes --out/run-<i>",
	"run-id":            "each run needs an id of its own",
	"pushgateway-url":   "the nightly pushes the median (give it before --)",
	"push-baseline":     "the nightly pushes its baseline's band",
	"perfdata":          "the nightly writes the median's (give it before --)",
	"results-configmap": "the nightly's output is its --out and its baseline",
	"dry-run":           "a dry run measures nothing to compare",
}

// parseNightly parses and validates nightly's command line, the run
// flags after -- included, before anything runs.
func parseNightly(args []string) (*nightlyOptions, error) {
	own, runArgs := args, []string(nil)
	for i, a := range args {
		if a == "--" {
			own, runArgs = args[:i], args[i+1:]
			break
		}
	}
	o := &nightlyOptions{RunArgs: runArgs}
	fs := flag.NewFlagSet("nightly", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	minEffect, confidence, gate, minEffectFor := defineNightlyFlags(fs, o)
	if err := parseFlags(fs, own); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (run flags go after --)", fs.Args())
	}
	var err error
	if o.Compare.MinEffect, err = parsePercent(*minEffect); err != nil {
		return nil, fmt.Errorf("--min-effect: %w", err)
	}
	if o.Compare.Bootstrap.Confidence, err = parsePercent(*confidence); err != nil || o.Compare.Bootstrap.Confidence <= 0 || o.Compare.Bootstrap.Confidence >= 1 {
		return nil, fmt.Errorf("--confidence: %q is not a level between 0%% and 100%%", *confidence)
	}
	o.Compare.MinEffectFor = minEffectFor
	if *gate != "" {
		if o.Compare.Gate, err = regexp.Compile(*gate); err != nil {
			return nil, fmt.Errorf("--gate: %w", err)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// defineNightlyFlags defines nightly's flags on fs, and returns compare's,
// which parseNightly checks.
func defineNightlyFlags(fs *flag.FlagSet, o *nightlyOptions) (minEffect, confidence, gate *string, minEffectFor minEffectsFlag) {
	fs.IntVar(&o.Runs, "runs", 3, "runs of the suite this night (compare forms an interval from 2 a side; 3 or more)")
	fs.StringVar(&o.Out, "out", "_artifacts/nightly", "directory for run-<i>/, median/ and the baseline compared with")
	fs.StringVar(&o.Baseline, "baseline", "", "the baseline set: a directory, or configmap:NAMESPACE/NAME in the cluster (required)")
	fs.BoolVar(&o.AllowPartial, "allow-partial", false, "let PARTIAL runs pass, and be recorded as the first night's baseline")
	fs.BoolVar(&o.RecordFirst, "record-first", true, "with no baseline yet, record this night's runs as it and exit 0 (false: exit 2)")
	fs.StringVar(&o.Suite, "suite", "", "the gpulab-conformance binary each run executes (default: this one)")
	fs.StringVar(&o.PushgatewayURL, "pushgateway-url", "", "push the night's median, and the baseline's band, to this Prometheus Pushgateway")
	fs.StringVar(&o.PerfData, "perfdata", "", perfDataUsage+" (the median's)")
	fs.StringVar(&o.Compare.Statistic, "statistic", results.DefaultStatistic, "the value each run contributes per measurement: p50, p90, p99 or max")
	fs.Float64Var(&o.Compare.NoiseSeconds, "noise-seconds", 0.05, "absolute change of the median in seconds always tolerated")
	fs.Float64Var(&o.Compare.NoiseCount, "noise-count", 1, "absolute change of the median in other units always tolerated")
	fs.BoolVar(&o.Compare.AllowMissing, "allow-missing", false, "let baseline measurements, features and assessments be absent from tonight's runs")
	minEffect = fs.String("min-effect", "15%", "smallest change of the median that is a regression (compare's --min-effect)")
	minEffectFor = minEffectsFlag{}
	fs.Var(minEffectFor, "min-effect-for", "`KEY=PCT`: the minimum effect for one measurement (feature/name); repeat for several")
	confidence = fs.String("confidence", "95%", "confidence level of the bootstrap interval")
	gate = fs.String("gate", "", "`REGEXP` of the measurements (feature/name) whose regression fails the night (default: every one)")
	return minEffect, confidence, gate, minEffectFor
}

func (o *nightlyOptions) validate() error {
	if o.Runs < 1 {
		return fmt.Errorf("--runs must be at least 1, got %d", o.Runs)
	}
	if o.Baseline == "" {
		return errors.New("--baseline is required: a directory, or configmap:NAMESPACE/NAME")
	}
	if strings.TrimSpace(o.Out) == "" {
		return errors.New("--out must not be empty")
	}
	if _, ok := results.Statistics[o.Compare.Statistic]; !ok {
		return fmt.Errorf("--statistic: %q, want p50, p90, p99 or max", o.Compare.Statistic)
	}
	// The same bounds as compare's: a NaN or an infinity turns the gate off.
	if err := checkCompareOptions(o.Compare); err != nil {
		return err
	}
	for _, a := range o.RunArgs {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if why, ok := nightlyOwnRunFlags[name]; ok && strings.HasPrefix(a, "-") {
			return fmt.Errorf("--%s after --: %s", name, why)
		}
	}
	run, err := ParseRun(o.RunArgs, io.Discard)
	if err != nil {
		if errors.Is(err, errHelp) {
			return errors.New("-h after --: `gpulab-conformance run -h` lists the run flags")
		}
		return fmt.Errorf("run flags (after --): %w", err)
	}
	o.Run = run
	if strings.HasPrefix(o.Baseline, configMapSource) && run.Profile != "cluster" {
		return fmt.Errorf("--baseline=%s: a ConfigMap baseline lives in the cluster the runs measure (--profile=cluster); "+
			"the %s profile makes a new cluster every run, so keep its baseline in a directory", o.Baseline, run.Profile)
	}
	if _, err := openBaseline(o.Baseline, run.Kubeconfig, run.Context); err != nil {
		return fmt.Errorf("--baseline: %w", err)
	}
	if o.PushgatewayURL != "" {
		if u, err := url.Parse(o.PushgatewayURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--pushgateway-url=%q: want an http:// or https:// URL", o.PushgatewayURL)
		}
	}
	return nil
}

// runSuite runs the suite once with its output in out and returns its
// exit code; err is a run that could not start.
type runSuite func(ctx context.Context, out string) (code int, err error)

// night is one nightly: its options, where the baseline is, how a run is
// started, and where it reports.
type night struct {
	opts           *nightlyOptions
	store          baselineStore
	run            runSuite
	stdout, stderr io.Writer
	now            func() time.Time
}

func nightlyCommand(args []string, stdout, stderr io.Writer) int {
	o, err := parseNightly(args)
	if errors.Is(err, errHelp) {
		fmt.Fprintf(stdout, "usage: %s\n", nightlyUsage)
		fs := flag.NewFlagSet("nightly", flag.ContinueOnError)
		fs.SetOutput(stdout)
		defineNightlyFlags(fs, &nightlyOptions{})
		fs.PrintDefaults()
		fmt.Fprintln(stdout, "after --: run's flags (gpulab-conformance run -h), but for those the nightly sets itself")
		return NightlyPassed
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance nightly: %v\n(gpulab-conformance nightly -h lists the flags)\n", err)
		return NightlyCannotCompare
	}
	if o.PerfData != "" {
		if o.PerfData, err = preparePerfDataDir(o.PerfData); err != nil {
			fmt.Fprintln(stderr, err)
			return NightlyCannotCompare
		}
	}
	store, _ := openBaseline(o.Baseline, o.Run.Kubeconfig, o.Run.Context) // validated
	suite := o.Suite
	if suite == "" {
		if suite, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "nightly: finding this binary: %v (give --suite)\n", err)
			return NightlyCannotCompare
		}
	}
	// SIGTERM (a CronJob's pod ending) reaches the running run, which then
	// cleans up what it created; the night stops after it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n := &night{opts: o, store: store, run: execSuite(suite, o.RunArgs, stdout, stderr), stdout: stdout, stderr: stderr, now: time.Now}
	return n.Run(ctx)
}

// execSuite runs `SUITE run --out=OUT RUNARGS...` as a child process.
func execSuite(suite string, runArgs []string, stdout, stderr io.Writer) runSuite {
	return func(ctx context.Context, out string) (int, error) {
		cmd := exec.CommandContext(ctx, suite, append([]string{"run", "--out=" + out}, runArgs...)...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 10 * time.Minute // its cleanup, then killed
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, nil
		case errors.As(err, &exit) && exit.ExitCode() >= 0:
			return exit.ExitCode(), nil
		default:
			return -1, fmt.Errorf("running %s: %w", suite, err)
		}
	}
}

// tally is what the night's runs came to.
type tally struct {
	runs            []results.Run // those that wrote results
	failed, partial []string      // "run-<i>: why"
}

// Run is the night: read the baseline, run, merge and push, then record
// or compare; it returns the exit code.
func (n *night) Run(ctx context.Context) int {
	o := n.opts
	baseline, err := n.store.Load(ctx, filepath.Join(o.Out, "baseline"))
	first := errors.Is(err, errNoBaseline)
	switch {
	case first && !o.RecordFirst:
		fmt.Fprintf(n.stderr, "nightly: %v, and --record-first=false (exit %d)\n", err, NightlyCannotCompare)
		return NightlyCannotCompare
	case err != nil && !first:
		// Known before an hour of runs: the night could decide nothing.
		fmt.Fprintf(n.stderr, "nightly: cannot compare: %v (exit %d)\n", err, NightlyCannotCompare)
		return NightlyCannotCompare
	}
	t := n.runAll(ctx)
	code := NightlyPassed
	fail := func(format string, args ...any) {
		fmt.Fprintf(n.stderr, "nightly: "+format+"\n", args...)
		code = NightlyFailed
	}
	if len(t.runs) == 0 {
		fail("no run wrote results")
		return n.end(NightlyFailed, "FAILED")
	}
	if err := n.merge(ctx, t.runs, baseline); err != nil {
		fail("%v", err)
	}
	if first {
		return n.record(ctx, t, code)
	}
	cmpCode := n.compare(t.runs, baseline)
	for _, f := range t.failed {
		fail("%s", f)
	}
	code = worstNightly(code, cmpCode)
	if len(t.partial) > 0 {
		if o.AllowPartial {
			fmt.Fprintf(n.stdout, "nightly: %d of %d runs PARTIAL (allowed by --allow-partial)\n", len(t.partial), o.Runs)
		} else {
			fmt.Fprintf(n.stderr, "nightly: %s (--allow-partial allows it; --requirements narrows what a run must evidence)\n", strings.Join(t.partial, "; "))
			code = worstNightly(code, NightlyPartial)
		}
	}
	return n.end(code, map[int]string{NightlyPassed: "nothing regressed", NightlyFailed: "FAILED",
		NightlyCannotCompare: "cannot compare", NightlyPartial: "PARTIAL"}[code])
}

// worstNightly orders outcomes: a failure or regression over a night that
// cannot compare, over a partial one, over a pass.
func worstNightly(a, b int) int {
	rank := map[int]int{NightlyPassed: 0, NightlyPartial: 1, NightlyCannotCompare: 2, NightlyFailed: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

func (n *night) end(code int, what string) int {
	fmt.Fprintf(n.stdout, "nightly: %s (exit %d)\n", what, code)
	return code
}

// runAll runs the suite --runs times, each into its own run-<i>, and
// stops early only when the night is cancelled.
func (n *night) runAll(ctx context.Context) tally {
	var t tally
	for i := 1; i <= n.opts.Runs; i++ {
		name := fmt.Sprintf("run-%d", i)
		if ctx.Err() != nil {
			t.failed = append(t.failed, name+": not run: the night was stopped")
			continue
		}
		dir, err := filepath.Abs(filepath.Join(n.opts.Out, name))
		if err == nil {
			err = os.RemoveAll(dir) // an earlier night's run must not pass for this one's
		}
		code := -1
		if err == nil {
			code, err = n.run(ctx, dir)
		}
		r, readErr := results.Read(filepath.Join(dir, results.ResultsFile))
		fmt.Fprintf(n.stdout, "nightly: %s of %d exited %d%s\n", name, n.opts.Runs, code, verdictNote(r))
		if readErr == nil {
			t.runs = append(t.runs, results.Run{Path: filepath.Join(dir, results.ResultsFile), Results: r})
		}
		switch {
		case err != nil:
			t.failed = append(t.failed, fmt.Sprintf("%s: %v", name, err))
		case readErr != nil:
			t.failed = append(t.failed, fmt.Sprintf("%s exited %d and wrote no results: %v", name, code, readErr))
		case code == results.ExitPartial:
			t.partial = append(t.partial, fmt.Sprintf("%s PARTIAL: %s", name, notPassed(r)))
		case code != results.ExitPassed:
			t.failed = append(t.failed, fmt.Sprintf("%s exited %d (%s)", name, code, r.Verdict))
		}
	}
	return t
}

func verdictNote(r *results.Results) string {
	if r == nil {
		return ""
	}
	return " (" + string(r.Verdict) + ")"
}

// notPassed names what kept a run from PASSED: features not passed and
// requested requirements not tested.
func notPassed(r *results.Results) string {
	var out []string
	for _, f := range r.Features {
		if f.Status != results.StatusPassed {
			out = append(out, f.Name+" "+f.Status.String())
		}
	}
	for _, e := range r.Evidence {
		if e.Requested && e.Status == results.StatusNotTested {
			out = append(out, string(e.Requirement)+" not tested")
		}
	}
	return strings.Join(out, ", ")
}

// merge writes the runs' median, its PerfData and pushes it with the
// baseline's band.
func (n *night) merge(ctx context.Context, runs, baseline []results.Run) error {
	merged := results.Median(runsResults(runs))
	dir := filepath.Join(n.opts.Out, "median")
	if err := merged.Write(dir); err != nil {
		return err
	}
	fmt.Fprintf(n.stdout, "nightly: the median of %d runs is in %s\n", len(runs), dir)
	if n.opts.PerfData != "" {
		if _, err := merged.WritePerfData(n.opts.PerfData); err != nil {
			return err
		}
	}
	if n.opts.PushgatewayURL != "" {
		if err := results.Push(ctx, n.opts.PushgatewayURL, merged, runsResults(baseline)...); err != nil {
			return fmt.Errorf("pushing the median: %w", err)
		}
	}
	return nil
}

func runsResults(runs []results.Run) []*results.Results {
	out := make([]*results.Results, len(runs))
	for i, r := range runs {
		out[i] = r.Results
	}
	return out
}

// record makes the first night's runs the baseline, when they may be one.
func (n *night) record(ctx context.Context, t tally, code int) int {
	o := n.opts
	switch {
	case len(t.failed) > 0:
		fmt.Fprintf(n.stderr, "nightly: no baseline at %s, and this night is not one: %s\n", n.store, strings.Join(t.failed, "; "))
		return n.end(NightlyFailed, "FAILED, no baseline recorded")
	case len(t.partial) > 0 && !o.AllowPartial:
		fmt.Fprintf(n.stderr, "nightly: no baseline at %s, and this night is not one: %s (--allow-partial records it)\n", n.store, strings.Join(t.partial, "; "))
		return n.end(NightlyPartial, "PARTIAL, no baseline recorded")
	case code != NightlyPassed:
		return n.end(code, "FAILED, no baseline recorded")
	}
	set, err := results.PromoteRuns(t.runs, results.PromoteOptions{AllowPartial: o.AllowPartial})
	if err != nil {
		fmt.Fprintf(n.stderr, "nightly: no baseline at %s, and this night's runs cannot be one: %v\n", n.store, err)
		return n.end(NightlyFailed, "FAILED, no baseline recorded")
	}
	if _, err := n.store.Save(ctx, t.runs, set, n.now()); err != nil {
		fmt.Fprintf(n.stderr, "nightly: recording the first baseline: %v\n", err)
		return n.end(NightlyCannotCompare, "cannot record the baseline")
	}
	fmt.Fprintf(n.stdout, "nightly: no baseline at %s: recorded this night's %d runs there as the baseline; the next night compares with them "+
		"(replace them with `gpulab-conformance baseline promote --to %s RUN...`)\n", n.store, len(set), n.store)
	return n.end(NightlyPassed, "first night, baseline recorded")
}

// compare checks tonight's runs against the baseline runs by compare's
// test, refusing (exit 2, with the reason) a baseline from another host
// class or cluster.
func (n *night) compare(current, baseline []results.Run) int {
	diffs := clusterDifferences(baseline, current)
	c, err := results.CompareRuns(baseline, current, n.opts.Compare)
	var incomparable *results.IncomparableError
	if errors.As(err, &incomparable) {
		diffs = append(diffs, incomparable.Differences...)
	} else if err != nil {
		fmt.Fprintf(n.stderr, "nightly: cannot compare: %v\n", err)
		return NightlyCannotCompare
	}
	if len(diffs) > 0 {
		fmt.Fprintf(n.stderr, "nightly: cannot compare with the baseline %s: %v\n"+
			"  a baseline is only compared with runs of its own cluster and host class; record one here: "+
			"gpulab-conformance baseline promote --to %s %s\n", n.store, &results.IncomparableError{Differences: diffs}, n.store, n.opts.Out)
		return NightlyCannotCompare
	}
	if results.PrintComparison(n.stdout, c) {
		return NightlyFailed
	}
	return NightlyPassed
}

// clusterDifferences refuses a baseline recorded on another cluster:
// compare allows a renamed cluster (its numbers may be compared on
// purpose), a nightly does not compare two clusters without being told.
func clusterDifferences(baseline, current []results.Run) []results.Difference {
	if len(baseline) == 0 || len(current) == 0 {
		return nil
	}
	a, b := baseline[0].Environment.ClusterName, current[0].Environment.ClusterName
	if a == "" || b == "" || a == b {
		return nil
	}
	return []results.Difference{{Field: "cluster", A: "baseline " + a, B: "current " + b}}
}
