// Command compare-schedulers measures the same gangs on Volcano versions
// and on Kubernetes' native gangs through gpulab's operator
// (conformance/sidebyside), and prints the table; `make
// compare-schedulers` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpulab/gpulab/conformance/sidebyside"
	"github.com/gpulab/gpulab/internal/version"
)

func main() {
	opts := sidebyside.SchedulerOptions{Log: os.Stdout}
	versions := flag.String("volcano-versions", "", "Volcano versions to compare, comma-separated, a testbed each; the first also serves native gangs (default: the testbed's default and v1.10.0)")
	flag.IntVar(&opts.Scale, "scale", 100, "gangs per run")
	flag.IntVar(&opts.Rounds, "rounds", 3, "counted runs per side, the order rotating (at least 2)")
	flag.BoolVar(&opts.NoWarmUp, "no-warm-up", false, "skip the uncounted warm-up round")
	flag.StringVar(&opts.Suite, "suite", "bin/gpulab-conformance", "the gpulab-conformance binary")
	flag.StringVar(&opts.Operator, "operator-binary", "bin/gpulab-operator", "the gpulab-operator binary")
	flag.StringVar(&opts.Out, "out", "_artifacts/compare-schedulers", "directory for each run's results and report.md")
	flag.StringVar(&opts.TestbedName, "testbed-name", "gpulab-schedulers", "prefix of the local testbeds it creates, one per Volcano version")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("compare-schedulers", version.Get())
		return
	}
	if *versions != "" {
		for _, v := range strings.Split(*versions, ",") {
			opts.VolcanoVersions = append(opts.VolcanoVersions, strings.TrimSpace(v))
		}
	}
	// The testbeds' clients log through controller-runtime; progress goes
	// to stdout already.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := sidebyside.RunSchedulers(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare-schedulers:", err)
		os.Exit(1)
	}
}
