// Command bench-scale measures gpulab's operator at several scales, one
// local testbed each (conformance/benchscale), and writes the table, the
// plots and the profiles; `make bench-scale` runs it.
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

	"github.com/gpulab/gpulab/conformance/benchscale"
	"github.com/gpulab/gpulab/internal/version"
)

func main() {
	opts := benchscale.Options{Log: os.Stdout}
	scales := flag.String("n", "10,100,300,1000", "comma-separated gang counts, one testbed each")
	flag.StringVar(&opts.Suite, "suite", "bin/gpulab-conformance", "the gpulab-conformance binary")
	flag.StringVar(&opts.Operator, "operator-binary", "bin/gpulab-operator", "the gpulab-operator binary")
	flag.StringVar(&opts.Out, "out", "_artifacts/bench-scale", "directory for each scale's results and profiles, report.md and the plots")
	flag.StringVar(&opts.TestbedName, "testbed-name", "gpulab-bench-scale", "name of the local testbeds it creates")
	reportOnly := flag.Bool("report-only", false, "measure nothing: render report.md and the plots from the n-<N>/ directories already in -out")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("bench-scale", version.Get())
		return
	}
	if *reportOnly {
		points, err := benchscale.ReadPoints(opts.Out)
		if err == nil {
			err = benchscale.WriteReport(opts.Out, points)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-scale:", err)
			os.Exit(1)
		}
		fmt.Println(benchscale.Markdown(points))
		return
	}
	// The testbed's clients log through controller-runtime; progress goes
	// to stdout already.
	ctrllog.SetLogger(logr.Discard())
	for _, s := range strings.Split(*scales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench-scale: -n: %q is not a positive gang count\n", s)
			os.Exit(2)
		}
		opts.Scales = append(opts.Scales, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	points, err := benchscale.Run(ctx, opts)
	stop()
	fmt.Println(benchscale.Markdown(points))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
}
