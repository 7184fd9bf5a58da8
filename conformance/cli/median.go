package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/gpulab/gpulab/conformance/results"
)

// medianCommand merges repeated runs: median --out DIR run1.json run2.json
// ... (or a directory of runs).
func medianCommand(args []string, stdout, stderr io.Writer) int {
	const usage = "gpulab-conformance median --out DIR [--cluster-name NAME] [--perfdata DIR] [--pushgateway-url URL [--push-baseline PATH]] run1/results.json run2/results.json ... (or a directory of runs)"
	fs := newCommandFlags("median", stderr, usage)
	out := fs.String("out", "", "directory for the merged results.json, junit.xml, report.md and report.html")
	clusterName := fs.String("cluster-name", "", "cluster name recorded in the merged results and its Pushgateway group")
	push := fs.String("pushgateway-url", "", "also push the merged results to this Prometheus Pushgateway")
	pushBaseline := fs.String("push-baseline", "", pushBaselineUsage)
	perfData := fs.String("perfdata", "", perfDataUsage)
	if code, ok := parseCommandFlags(fs, args); !ok {
		return code
	}
	if *out == "" || fs.NArg() == 0 {
		fmt.Fprintf(stderr, "usage: %s\n", usage)
		return results.ExitUsage
	}
	if *pushBaseline != "" && *push == "" {
		fmt.Fprintln(stderr, "--push-baseline needs --pushgateway-url")
		return results.ExitUsage
	}
	// Read before anything is written: a bad path is a usage error.
	baseline, err := results.ReadBaseline(*pushBaseline)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return results.ExitUsage
	}
	if isFlagSet(fs, "perfdata") {
		dir, err := preparePerfDataDir(*perfData)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return results.ExitUsage
		}
		*perfData = dir
	}
	read, skipped, err := results.ReadRuns(fs.Args()...)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return results.ExitUsage
	}
	for _, s := range skipped {
		fmt.Fprintf(stderr, "median: skipped %s; name it to merge it\n", s)
	}
	runs := make([]*results.Results, len(read))
	for i, r := range read {
		runs[i] = r.Results
	}
	merged := results.Median(runs)
	if *clusterName != "" {
		merged.Environment.ClusterName = *clusterName
	}
	if err := merged.Write(*out); err != nil {
		fmt.Fprintln(stderr, err)
		return results.ExitFailed
	}
	if *perfData != "" {
		if _, err := merged.WritePerfData(*perfData); err != nil {
			fmt.Fprintln(stderr, err)
			return results.ExitFailed
		}
	}
	if *push != "" {
		if err := results.Push(context.Background(), *push, merged, baseline...); err != nil {
			fmt.Fprintln(stderr, err)
			return results.ExitFailed
		}
	}
	fmt.Fprint(stdout, merged.Markdown())
	return results.ExitPassed
}
