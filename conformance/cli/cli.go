// Package cli is the gpulab-conformance command line: its subcommands,
// their flags (grouped in -h), validation before anything touches a
// cluster, and the exit codes. The suite itself stays e2e-framework
// features in the conformance test package, which calls Main first.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpulab/gpulab/conformance/results"
)

// Main dispatches a command line (without the program name). For `run` it
// returns the validated options and the suite runs them; for every other
// subcommand, for help and for bad usage it returns nil and the exit code.
//
// No subcommand means `run`, so `go test` (which passes only -test.*
// flags) and older scripts keep working.
func Main(args []string, stdout, stderr io.Writer) (*RunOptions, int) {
	cmd, rest := "run", args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, rest = args[0], args[1:]
	}
	switch cmd {
	case "run":
		opts, err := ParseRun(rest, stderr)
		if err != nil {
			if errors.Is(err, errHelp) {
				printUsage(stdout, true)
				return nil, results.ExitPassed
			}
			fmt.Fprintf(stderr, "gpulab-conformance run: %v\n(gpulab-conformance -h lists the flags)\n", err)
			return nil, results.ExitUsage
		}
		return opts, 0
	case "compare":
		return nil, compareCommand(rest, stdout, stderr)
	case "nightly":
		return nil, nightlyCommand(rest, stdout, stderr)
	case "median":
		return nil, medianCommand(rest, stdout, stderr)
	case "baseline":
		return nil, baselineCommand(rest, stdout, stderr)
	case "version":
		return nil, versionCommand(rest, stdout, stderr)
	case "cleanup":
		return nil, cleanupCommand(rest, stdout, stderr)
	case "submit":
		return nil, submitCommand(rest, stdout, stderr)
	case "status":
		return nil, statusCommand(rest, stdout, stderr)
	case "retrieve":
		return nil, retrieveCommand(rest, stdout, stderr)
	case "help":
		printUsage(stdout, true)
		return nil, results.ExitPassed
	default:
		fmt.Fprintf(stderr, "gpulab-conformance: unknown command %q\n\n", cmd)
		printUsage(stderr, false)
		return nil, results.ExitUsage
	}
}

const commands = `usage: gpulab-conformance <command> [flags]

commands:
  run       run the suite (the default command)
  compare   compare a run's results.json with a baseline; exit 1 on a regression or a missing item
  median    merge repeated runs into one results.json (median percentiles, worst verdicts)
  nightly   run the suite N times, merge, push, compare with a baseline (a directory or configmap:NS/NAME); exit 0, 1, 2 or 3 as below
  baseline  promote runs to a baseline set (baseline promote --to DIR|configmap:NS/NAME RUN...)
  submit    run the suite in the cluster as a Job under the shipped RBAC (run flags; --runner-image), following its log
  status    a submitted run's phase and verdict (--run-id ID)
  retrieve  copy a submitted run's results out of the cluster (--run-id ID --to DIR)
  cleanup   delete what a run (and its runner) left on a cluster (--run-id ID, or --all-runs)
  version   print the suite's version

exit codes: 0 passed, 1 failed (or a regression), 2 bad usage (nightly: or cannot compare), 3 partial (something asked for could not be tested)
`

func printUsage(w io.Writer, withRunFlags bool) {
	fmt.Fprint(w, commands)
	if withRunFlags {
		fmt.Fprint(w, "\nrun flags:\n")
		printRunFlags(w)
	}
	fmt.Fprint(w, "\n`gpulab-conformance <command> -h` shows a command's flags.\n")
}
