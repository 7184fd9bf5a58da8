// Command compare-schedulers measures the same gangs on Volcano versions
// and on Kubernetes' native gangs through gpulab's operator
// (conformance/sidebyside), and prints the table; `make
// compare-schedulers` runs it.
package main

import (
	"context"
	"flag"
	"strings"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/sidebyside"
)

func main() {
	var opts sidebyside.SchedulerOptions
	cmd := bench.NewCommand("compare-schedulers", &opts.Options, bench.Flags{
		Out: "_artifacts/compare-schedulers", OutHelp: "directory for each run's results and report.md",
		TestbedName: sidebyside.DefaultSchedulersTestbedName, TestbedHelp: "prefix of the local testbeds it creates, one per Volcano version"})
	versions := flag.String("volcano-versions", "", "Volcano versions to compare, comma-separated, a testbed each; the first also serves native gangs (default: the testbed's default and v1.10.0)")
	flag.IntVar(&opts.Scale, "scale", 100, "gangs per run")
	flag.IntVar(&opts.Rounds, "rounds", bench.DefaultRounds, "counted runs per side, the order rotating (at least 2)")
	flag.BoolVar(&opts.NoWarmUp, "no-warm-up", false, "skip the uncounted warm-up round")
	cmd.Parse()
	if *versions != "" {
		for _, v := range strings.Split(*versions, ",") {
			opts.VolcanoVersions = append(opts.VolcanoVersions, strings.TrimSpace(v))
		}
	}
	cmd.Run(func(ctx context.Context) error {
		_, err := sidebyside.RunSchedulers(ctx, opts)
		return err
	})
}
