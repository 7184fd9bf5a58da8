// Package sidebyside compares operators on the same gangs: gpulab's
// (--workload=gpucluster), KubeRay's (--workload=raycluster) and the floor
// without any operator (--workload=bare), each measured by the conformance
// suite's latency feature on one testbed, in rotating order over several
// rounds. It renders the ranges over the rounds and the ratios of the
// medians with their bootstrap intervals.
package sidebyside

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/gpulab/gpulab/conformance/results"
)

// Workloads are the sides: the floor, gpulab and KubeRay. The ratios are
// gpulab / floor (the operator's overhead) and KubeRay / gpulab.
var Workloads = []string{"bare", "gpucluster", "raycluster"}

// The sides by role.
const (
	floorSide  = "bare"
	gpulabSide = "gpucluster"
	kuberay    = "raycluster"
)

// Row is one measurement on both sides.
type Row struct {
	Metric, Unit string
	// Values are each side's p99 (or single value) over the rounds.
	Values map[string][]float64
}

// metrics are the latency feature's measurements worth comparing, in
// report order; a phase is compared at p50, p90 and p99.
var (
	phases = results.LatencyPhases
	values = results.LatencyCosts
	// shape are the PodGroup fields both sides must agree on.
	shape = []string{"gang_min_member", "gang_min_cpu", "gang_min_memory", "gang_min_gpus"}
)

// Rows collects the measurements of each side's runs.
func Rows(runs map[string][]*results.Results) []Row {
	var rows []Row
	get := func(name string, pick func(results.Measurement) float64) Row {
		row := Row{Metric: name, Values: map[string][]float64{}}
		for _, w := range Workloads {
			for _, r := range runs[w] {
				for _, m := range r.Measurements {
					if m.Feature == "latency" && m.Name == strings.SplitN(name, " ", 2)[0] {
						row.Unit = m.Unit
						row.Values[w] = append(row.Values[w], pick(m))
					}
				}
			}
		}
		return row
	}
	for _, p := range phases {
		rows = append(rows,
			get(p+" p50", func(m results.Measurement) float64 { return m.P50 }),
			get(p+" p90", func(m results.Measurement) float64 { return m.P90 }),
			get(p+" p99", func(m results.Measurement) float64 { return m.P99 }))
	}
	for _, v := range values {
		rows = append(rows, get(v, func(m results.Measurement) float64 { return m.P99 }))
	}
	for i := range rows {
		if rows[i].Unit == "bytes" {
			rows[i].Unit = "MiB"
			for w, vs := range rows[i].Values {
				for j := range vs {
					rows[i].Values[w][j] = vs[j] / (1 << 20)
				}
			}
		}
	}
	return rows
}

// CheckSameGangs fails unless every run of both sides asked Volcano for
// the same gang (minMember and minResources of its PodGroups), passed, and
// measured the same number of gangs.
func CheckSameGangs(runs map[string][]*results.Results) error {
	var problems []string
	want := map[string]float64{}
	for _, w := range Workloads {
		if len(runs[w]) == 0 {
			problems = append(problems, fmt.Sprintf("no run of %s", w))
		}
		for i, r := range runs[w] {
			if r.Verdict != results.VerdictPassed {
				problems = append(problems, fmt.Sprintf("%s run %d is %s", w, i+1, r.Verdict))
			}
			got := map[string]float64{}
			for _, m := range r.Measurements {
				if m.Feature == "latency" {
					got[m.Name] = m.P99
				}
			}
			for _, name := range append([]string{"clusters"}, shape...) {
				v, ok := got[name]
				switch prev, seen := want[name]; {
				case !ok:
					problems = append(problems, fmt.Sprintf("%s run %d did not measure %s", w, i+1, name))
				case !seen:
					want[name] = v
				case v != prev:
					problems = append(problems, fmt.Sprintf("%s run %d: %s %v, another run %v: the gangs differ", w, i+1, name, v, prev))
				}
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the two sides did not measure the same gangs: %s", strings.Join(problems, "; "))
	}
	return nil
}

// Print writes the table: each side's range over the rounds and the two
// ratios of the medians with their intervals.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(cells(r), "\t"))
	}
	_ = tw.Flush()
}

var header = []string{"MEASUREMENT", "UNIT", "floor", "gpulab", "KubeRay", "gpulab / floor", "KubeRay / gpulab"}

// Markdown is the table as Markdown, for the report and the docs.
func Markdown(rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells(r), " | "))
	}
	return b.String()
}

// cells are a row's columns: measurement, unit, each side's range and
// the two ratios.
func cells(r Row) []string {
	return []string{r.Metric, r.Unit, span(r.Values[floorSide]), span(r.Values[gpulabSide]), span(r.Values[kuberay]),
		ratio(r.Values[floorSide], r.Values[gpulabSide]), ratio(r.Values[gpulabSide], r.Values[kuberay])}
}

// ratio is median(num) / median(den) with the 95% bootstrap interval
// over the rounds (each round one value a side), e.g. "1.12 [0.98, 1.30]";
// "-" where a side is missing or its median is 0.
func ratio(den, num []float64) string {
	md := median(den)
	if len(den) == 0 || len(num) == 0 || md <= 0 {
		return "-"
	}
	out := fmt.Sprintf("%.2f", median(num)/md)
	if lo, hi, ok := results.BootstrapMedianChange(den, num, results.BootstrapOptions{}); ok && !math.IsInf(lo, 0) && !math.IsInf(hi, 0) {
		out += fmt.Sprintf(" [%.2f, %.2f]", 1+lo, 1+hi)
	}
	return out
}

// span is a range over the rounds, "a–b" (one value when they agree).
func span(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if s[0] == s[len(s)-1] {
		return num(s[0])
	}
	return num(s[0]) + "–" + num(s[len(s)-1])
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
