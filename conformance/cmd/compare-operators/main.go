// Command compare-operators measures gpulab's operator and KubeRay's side
// by side on one local testbed (conformance/sidebyside) and prints the
// table; `make compare-operators` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpulab/gpulab/conformance/sidebyside"
	"github.com/gpulab/gpulab/internal/version"
)

func main() {
	opts := sidebyside.Options{Log: os.Stdout}
	flag.IntVar(&opts.Scale, "scale", 100, "gangs created at once in each run")
	flag.IntVar(&opts.Rounds, "rounds", 2, "runs per operator, the order alternating")
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
