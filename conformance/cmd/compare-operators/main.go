// Command compare-operators measures the floor (no operator), gpulab's
// operator and KubeRay's side by side, one local testbed per scale
// (conformance/sidebyside), and prints the tables; `make
// compare-operators` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpulab/gpulab/conformance/sidebyside"
	"github.com/gpulab/gpulab/internal/version"
)

func main() {
	opts := sidebyside.Options{Log: os.Stdout}
	scales := flag.String("scales", "100,300", "gang counts created at once, comma-separated, one testbed each")
	flag.IntVar(&opts.Rounds, "rounds", 3, "counted runs per side and scale, the order rotating (at least 2)")
	flag.BoolVar(&opts.NoWarmUp, "no-warm-up", false, "skip the uncounted warm-up round")
	flag.StringVar(&opts.Suite, "suite", "bin/gpulab-conformance", "the gpulab-conformance binary")
	flag.StringVar(&opts.Operator, "operator-binary", "bin/gpulab-operator", "the gpulab-operator binary")
	flag.StringVar(&opts.Out, "out", "_artifacts/compare-operators", "directory for each run's results and report.md")
	flag.StringVar(&opts.TestbedName, "testbed-name", "gpulab-side-by-side", "name of the local testbed it creates")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("compare-operators", version.Get())
		return
	}
	for _, f := range strings.Split(*scales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "compare-operators: --scales=%q: want positive integers separated by commas\n", *scales)
			os.Exit(2)
		}
		opts.Scales = append(opts.Scales, n)
	}
	// The testbed's clients log through controller-runtime; progress goes
	// to stdout already.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := sidebyside.Run(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare-operators:", err)
		os.Exit(1)
	}
}
