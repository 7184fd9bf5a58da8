// Command compare-operators measures the floor (no operator), gpulab's
// operator and KubeRay's side by side, one local testbed per scale
// (conformance/sidebyside), and prints the tables; `make
// compare-operators` runs it.
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/sidebyside"
)

func main() {
	var opts sidebyside.Options
	cmd := bench.NewCommand("compare-operators", &opts.Options, bench.Flags{
		Out: "_artifacts/compare-operators", OutHelp: "directory for each run's results and report.md",
		TestbedName: sidebyside.DefaultTestbedName, TestbedHelp: "name of the local testbed it creates"})
	scales := flag.String("scales", "100,300", "gang counts created at once, comma-separated, one testbed each")
	flag.IntVar(&opts.Rounds, "rounds", bench.DefaultRounds, "counted runs per side and scale, the order rotating (at least 2)")
	flag.BoolVar(&opts.NoWarmUp, "no-warm-up", false, "skip the uncounted warm-up round")
	limits := flag.String("limits", sidebyside.LimitsSame, "what the operators run at: \"same\" (both at gpulab's shipped reconcile workers and client QPS/burst), "+
		"\"shipped\" (each at its own shipped defaults) or WORKERS/QPS/BURST for both, e.g. 16/200/400")
	flag.StringVar(&opts.Identity, "operator-identity", bench.IdentityAdmin, fmt.Sprintf("who gpulab's operator is to the API server, one of %v: "+
		"the testbed's admin (exempt from API Priority and Fairness), its shipped ServiceAccount and RBAC, or those with its shipped FlowSchema", bench.Identities))
	cmd.Parse()
	if err := bench.CheckIdentity(opts.Identity); err != nil {
		cmd.Usage("--operator-identity: %v", err)
	}
	var err error
	if opts.Limits, err = sidebyside.ParseLimits(*limits); err != nil {
		cmd.Usage("--limits: %v", err)
	}
	if opts.Scales, err = bench.ParseScales(*scales); err != nil {
		cmd.Usage("--scales=%q: want positive integers separated by commas (%v)", *scales, err)
	}
	cmd.Run(func(ctx context.Context) error {
		_, err := sidebyside.Run(ctx, opts)
		return err
	})
}
