// Command compare-autoscaling runs the conformance suite's autoscaling
// feature (cluster_autoscaling) on a local testbed with Karpenter, for
// Volcano and Kubernetes' native gangs, each with the suite's workloads
// (conformance/sidebyside), and prints the table; `make
// compare-autoscaling` runs it.
package main

import (
	"context"
	"flag"
	"strings"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/sidebyside"
)

func main() {
	var opts sidebyside.AutoscalingOptions
	cmd := bench.NewCommand("compare-autoscaling", &opts.Options, bench.Flags{
		Out: "_artifacts/compare-autoscaling", OutHelp: "directory for each run's results and report.md",
		TestbedName: sidebyside.DefaultAutoscalingTestbedName, TestbedHelp: "name of the local testbed it creates (Karpenter, Volcano and native gangs)"})
	workloads := flag.String("workloads", strings.Join(sidebyside.DefaultAutoscalingWorkloads, ","), "the suite's workloads run on each stack, comma-separated; a pair that cannot run the feature is a finding")
	flag.StringVar(&opts.VolcanoVersion, "volcano-version", "", "the Volcano stack's version (default: the testbed's)")
	flag.IntVar(&opts.Rounds, "rounds", bench.DefaultRounds, "counted runs per stack and workload, the order rotating (1: a check that it runs, no intervals)")
	flag.BoolVar(&opts.NoWarmUp, "no-warm-up", false, "skip the uncounted warm-up round")
	cmd.Parse()
	for _, w := range strings.Split(*workloads, ",") {
		opts.Workloads = append(opts.Workloads, strings.TrimSpace(w))
	}
	cmd.Run(func(ctx context.Context) error {
		_, err := sidebyside.RunAutoscaling(ctx, opts)
		return err
	})
}
