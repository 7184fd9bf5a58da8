// Command bench-scale measures gpulab's operator at several scales, one
// local testbed each (conformance/benchscale), and writes the table, the
// plots and the profiles; `make bench-scale` runs it.
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/benchscale"
)

func main() {
	var opts benchscale.Options
	cmd := bench.NewCommand("bench-scale", &opts.Options, bench.Flags{
		Out: "_artifacts/bench-scale", OutHelp: "directory for each scale's results and profiles, report.md and the plots",
		TestbedName: benchscale.DefaultTestbedName, TestbedHelp: "name of the local testbeds it creates"})
	scales := flag.String("n", "10,100,300,1000", "comma-separated gang counts, one testbed each")
	reportOnly := flag.Bool("report-only", false, "measure nothing: render report.md and the plots from the n-<N>/ directories already in -out")
	cmd.Parse()
	if *reportOnly {
		points, err := benchscale.ReadPoints(opts.Out)
		if err == nil {
			err = benchscale.WriteReport(opts.Out, points)
		}
		cmd.Exit(err)
		fmt.Println(benchscale.Markdown(points))
		return
	}
	var err error
	if opts.Scales, err = bench.ParseScales(*scales); err != nil {
		cmd.Usage("-n: %v", err)
	}
	cmd.Run(func(ctx context.Context) error {
		points, err := benchscale.Run(ctx, opts)
		fmt.Println(benchscale.Markdown(points))
		return err
	})
}
