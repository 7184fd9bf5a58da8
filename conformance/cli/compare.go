package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/gpulab/gpulab/conformance/results"
)

// compareUsage is compare's usage line.
const compareUsage = "gpulab-conformance compare --baseline BASELINE [--baseline ...] [flags] CURRENT... (or --current CURRENT)\n" +
	"  each BASELINE and CURRENT is a results.json, or a directory searched for results.json at any depth (medians skipped)"

// compareCommand checks current runs against baseline runs: exit 0 when
// they hold, 1 on a regression, a missing measurement, feature or
// assessment, or a failed feature, 2 on bad usage, a file it cannot read,
// or runs it may not compare (different scale, workload, profile,
// scheduler or host class, unless --allow-different).
func compareCommand(args []string, stdout, stderr io.Writer) int {
	fs := newCommandFlags("compare", stderr, compareUsage)
	var baselines, currents pathsFlag
	fs.Var(&baselines, "baseline", "a baseline `PATH`: results.json, or a directory of runs (required; repeat for several)")
	fs.Var(&currents, "current", "a current `PATH`: results.json, or a directory of runs (repeat for several, or name them after the flags)")
	minEffect := fs.String("min-effect", "15%", "smallest change of the median that is a regression (or an improvement)")
	minEffectFor := minEffectsFlag{}
	fs.Var(minEffectFor, "min-effect-for", "`KEY=PCT`: the minimum effect for one measurement (feature/name), e.g. latency/create_to_ready=25%; repeat for several")
	maxReg := fs.String("max-regression", "", "deprecated: the old name of --min-effect")
	confidence := fs.String("confidence", "95%", "confidence level of the bootstrap interval")
	statistic := fs.String("statistic", results.DefaultStatistic, "the value each run contributes per measurement: p50, p90, p99 or max")
	resamples := fs.Int("resamples", results.DefaultResamples, "bootstrap resamples (the seed is fixed, so a comparison repeats exactly)")
	noiseS := fs.Float64("noise-seconds", 0.05, "absolute change of the median in seconds always tolerated")
	noiseN := fs.Float64("noise-count", 1, "absolute change of the median in other units always tolerated")
	gate := fs.String("gate", "", "`REGEXP` of the measurements (feature/name) whose regression fails the comparison; the others are shown, not gated (default: every measurement)")
	allowMissing := fs.Bool("allow-missing", false, "let baseline measurements, features and assessments be absent from the current runs")
	allowDifferent := fs.Bool("allow-different", false, "compare runs that differ in scale, workload, profile, scheduler or host class (between the sides or within one)")
	positional, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	currents = append(currents, positional...)
	if len(baselines) == 0 || len(currents) == 0 {
		fmt.Fprintf(stderr, "usage: %s\n", compareUsage)
		return results.ExitUsage
	}
	opts := results.CompareOptions{
		Statistic: *statistic, MinEffectFor: minEffectFor, NoiseSeconds: *noiseS, NoiseCount: *noiseN,
		AllowMissing: *allowMissing, AllowDifferent: *allowDifferent,
	}
	var err error
	if *gate != "" {
		if opts.Gate, err = regexp.Compile(*gate); err != nil {
			fmt.Fprintf(stderr, "--gate: %v\n", err)
			return results.ExitUsage
		}
	}
	effectFlag, effect := "--min-effect", *minEffect
	if *maxReg != "" {
		if isFlagSet(fs, "min-effect") {
			fmt.Fprintln(stderr, "--max-regression is the old name of --min-effect: give one")
			return results.ExitUsage
		}
		effectFlag, effect = "--max-regression", *maxReg
	}
	if opts.MinEffect, err = parsePercent(effect); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", effectFlag, err)
		return results.ExitUsage
	}
	if opts.Bootstrap.Confidence, err = parsePercent(*confidence); err != nil {
		fmt.Fprintf(stderr, "--confidence: %q is not a level between 0%% and 100%%, such as 95%%\n", *confidence)
		return results.ExitUsage
	}
	if _, ok := results.Statistics[*statistic]; !ok {
		fmt.Fprintf(stderr, "--statistic: %q, want p50, p90, p99 or max\n", *statistic)
		return results.ExitUsage
	}
	opts.Bootstrap.Resamples = *resamples
	if err := checkCompareOptions(opts); err != nil {
		fmt.Fprintln(stderr, err)
		return results.ExitUsage
	}
	b, skipped, err := results.ReadRuns(baselines...)
	if err != nil {
		fmt.Fprintf(stderr, "reading the baseline: %v\n", err)
		return results.ExitUsage
	}
	c, skippedCur, err := results.ReadRuns(currents...)
	if err != nil {
		fmt.Fprintf(stderr, "reading the current runs: %v\n", err)
		return results.ExitUsage
	}
	for _, s := range append(skipped, skippedCur...) {
		fmt.Fprintf(stderr, "compare: skipped %s; name it to compare it\n", s)
	}
	comparison, err := results.CompareRuns(b, c, opts)
	var incomparable *results.IncomparableError
	switch {
	case errors.As(err, &incomparable):
		fmt.Fprintf(stderr, "compare: %v\n(--allow-different compares them anyway)\n", err)
		return results.ExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return results.ExitUsage
	}
	if results.PrintComparison(stdout, comparison) {
		return results.ExitFailed
	}
	return results.ExitPassed
}

// Bounds of --resamples: fewer than minResamples make the interval's ends
// noise; each resample is a float64 per side, so maxResamples holds a
// comparison to megabytes (2,000,000,000 would ask for 16 GB).
const (
	minResamples = 100
	maxResamples = 1_000_000
)

// checkCompareOptions refuses, naming the flag, what would switch the gate
// off (a NaN or infinite effect, noise or confidence makes every change
// pass) or exhaust memory. compare and nightly take the same flags.
func checkCompareOptions(o results.CompareOptions) error {
	if c := o.Bootstrap.Confidence; !(c > 0 && c < 1) {
		return fmt.Errorf("--confidence: %g%% is not a level between 0%% and 100%%, such as 95%%", c*100)
	}
	if r := o.Bootstrap.Resamples; r != 0 && (r < minResamples || r > maxResamples) {
		return fmt.Errorf("--resamples: %d, want %d to %d", r, minResamples, maxResamples)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--min-effect", o.MinEffect}, {"--noise-seconds", o.NoiseSeconds}, {"--noise-count", o.NoiseCount}} {
		if !finiteNonNegative(f.v) {
			return fmt.Errorf("%s: %g, want a finite value, 0 or more", f.name, f.v)
		}
	}
	for key, v := range o.MinEffectFor {
		if !finiteNonNegative(v) {
			return fmt.Errorf("--min-effect-for %s: %g, want a finite percentage, 0 or more", key, v*100)
		}
	}
	return nil
}

// finiteNonNegative is false for NaN too, which every comparison fails.
func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// pathsFlag is a repeatable flag of paths.
type pathsFlag []string

func (p *pathsFlag) String() string { return strings.Join(*p, ",") }

func (p *pathsFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty path")
	}
	*p = append(*p, s)
	return nil
}

// minEffectsFlag is the repeatable --min-effect-for KEY=PCT.
type minEffectsFlag map[string]float64

func (m minEffectsFlag) String() string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%g%%", k, v*100))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func (m minEffectsFlag) Set(s string) error {
	key, pct, ok := strings.Cut(s, "=")
	if !ok || !strings.Contains(key, "/") {
		return fmt.Errorf("%q: want feature/name=PCT, such as latency/create_to_ready=25%%", s)
	}
	v, err := parsePercent(pct)
	if err != nil {
		return err
	}
	m[key] = v
	return nil
}

// parseInterspersed parses flags that may come after positional arguments
// too ("compare run1.json --baseline base/"), as GNU tools do; after "--"
// everything is positional. It returns the positional arguments, or the
// exit code when the command must stop.
func parseInterspersed(fs *flag.FlagSet, args []string) (positional []string, code int, ok bool) {
	for {
		if code, ok := parseCommandFlags(fs, args); !ok {
			return nil, code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, 0, true
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), 0, true
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
}

// parsePercent reads "10%" or "10" as 0.10. A negative share would call
// every unchanged measurement a regression, and NaN or an infinite one
// none, so they are refused.
func parsePercent(s string) (float64, error) {
	pct, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a percentage such as 10%%: %w", s, err)
	}
	if math.IsNaN(pct) || math.IsInf(pct, 0) {
		return 0, fmt.Errorf("%q is not a finite percentage", s)
	}
	if pct < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return pct / 100, nil
}

// newCommandFlags is a subcommand's flag set: errors returned, not exited on,
// and help that starts with the usage line.
func newCommandFlags(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseCommandFlags parses args and, when the command must stop, says with which exit
// code: 0 for -h, 2 for a bad flag (the flag package printed why).
func parseCommandFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		return results.ExitPassed, false
	default:
		return results.ExitUsage, false
	}
}
