package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpulab/gpulab/conformance/results"
)

// compareCommand checks a run against a baseline: exit 0 when it holds, 1
// on a regression, a missing measurement, feature or assessment, or a
// failed feature, 2 on bad usage or a file it cannot read.
func compareCommand(args []string, stdout, stderr io.Writer) int {
	const usage = "gpulab-conformance compare --baseline BASELINE.json --current RUN/results.json [--max-regression 10%] [--noise-seconds 0.05] [--noise-count 1] [--allow-missing]"
	fs := newCommandFlags("compare", stderr, usage)
	baseline := fs.String("baseline", "", "baseline results.json (required)")
	current := fs.String("current", "", "current results.json (required)")
	maxReg := fs.String("max-regression", "10%", "allowed relative p99 growth, as a percentage")
	noiseS := fs.Float64("noise-seconds", 0.05, "absolute p99 growth in seconds always tolerated")
	noiseN := fs.Float64("noise-count", 1, "absolute p99 growth in counts always tolerated")
	allowMissing := fs.Bool("allow-missing", false, "let baseline measurements, features and assessments be absent from the current run")
	if code, ok := parseCommandFlags(fs, args); !ok {
		return code
	}
	if *baseline == "" || *current == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "usage: %s\n", usage)
		return results.ExitUsage
	}
	maxRegression, err := parsePercent(*maxReg)
	if err != nil {
		fmt.Fprintf(stderr, "--max-regression: %v\n", err)
		return results.ExitUsage
	}
	if *noiseS < 0 || *noiseN < 0 {
		fmt.Fprintln(stderr, "--noise-seconds and --noise-count must not be negative")
		return results.ExitUsage
	}
	b, err := results.Read(*baseline)
	if err != nil {
		fmt.Fprintf(stderr, "reading the baseline: %v\n", err)
		return results.ExitUsage
	}
	c, err := results.Read(*current)
	if err != nil {
		fmt.Fprintf(stderr, "reading the current run: %v\n", err)
		return results.ExitUsage
	}
	comparison := results.Compare(b, c, results.CompareOptions{
		MaxRegression: maxRegression, NoiseSeconds: *noiseS, NoiseCount: *noiseN, AllowMissing: *allowMissing,
	})
	if results.PrintComparison(stdout, comparison) {
		return results.ExitFailed
	}
	return results.ExitPassed
}

// parsePercent reads "10%" or "10" as 0.10. A negative share would call
// every unchanged measurement a regression, so it is refused.
func parsePercent(s string) (float64, error) {
	pct, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a percentage such as 10%%: %w", s, err)
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
