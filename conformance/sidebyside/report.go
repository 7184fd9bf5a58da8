// Package sidebyside compares sides on the same gangs, each measured by
// the conformance suite on the same testbeds in rotating order over
// several rounds: operators (gpulab's --workload=gpucluster, KubeRay's
// --workload=raycluster and the floor without any operator,
// --workload=bare; Run), gang schedulers (Volcano versions and
// Kubernetes' native gangs; RunSchedulers) and node autoscaling (the
// autoscaling feature per stack and workload with Karpenter;
// RunAutoscaling), each a declaration of its testbeds and sides on the
// benchmarks' harness (conformance/bench). It
// renders the ranges over the rounds and the ratios of the medians with
// their bootstrap intervals.
package sidebyside

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/gpulab/gpulab/conformance/results"
)

// Workloads are the operator comparison's sides: the floor, gpulab and
// KubeRay. The ratios are gpulab / floor (the operator's overhead) and
// KubeRay / gpulab.
var Workloads = []string{floorSide, gpulabSide, kuberay}

// The sides by role.
const (
	floorSide  = "bare"
	gpulabSide = "gpucluster"
	kuberay    = "raycluster"
	nativeSide = "kubernetes"
)

// Row is one measurement on every side.
type Row struct {
	Metric, Unit string
	// Values are each side's value of the metric (a percentile, or the
	// single value) over the rounds.
	Values map[string][]float64
}

// Table says which sides a comparison has, in column order, which ratios
// of their medians it shows and which of the latency feature's
// measurements it compares.
type Table struct {
	Sides []Side
	// Ratios are Num / Den, both side keys.
	Ratios []Ratio
	// Phases are compared at Percentiles; Values (single values) as they
	// are.
	Phases, Percentiles, Values []string
}

// Side is one column: the key its runs are filed under and its label.
type Side struct{ Key, Label string }

// Ratio is a column of median(Num) / median(Den).
type Ratio struct{ Num, Den string }

// Operators is the operator comparison's table: the floor, gpulab and
// KubeRay, every phase at p50, p90 and p99 and every cost.
var Operators = Table{
	Sides:       []Side{{floorSide, "floor"}, {gpulabSide, "gpulab"}, {kuberay, "KubeRay"}},
	Ratios:      []Ratio{{Num: gpulabSide, Den: floorSide}, {Num: kuberay, Den: gpulabSide}},
	Phases:      results.LatencyPhases,
	Percentiles: []string{"p50", "p90", "p99"},
	Values:      results.LatencyCosts,
}

// shape are the PodGroup fields every side must agree on.
var shape = []string{"gang_min_member", "gang_min_cpu", "gang_min_memory", "gang_min_gpus"}

// Rows collects the measurements of each side's runs.
func (t Table) Rows(runs map[string][]*results.Results) []Row {
	var rows []Row
	get := func(name string, pick func(results.Measurement) float64) Row {
		row := Row{Metric: name, Values: map[string][]float64{}}
		for _, s := range t.Sides {
			for _, r := range runs[s.Key] {
				for _, m := range r.Measurements {
					if m.Feature == "latency" && m.Name == strings.SplitN(name, " ", 2)[0] {
						row.Unit = m.Unit
						row.Values[s.Key] = append(row.Values[s.Key], pick(m))
					}
				}
			}
		}
		return row
	}
	percentile := map[string]func(results.Measurement) float64{
		"p50": func(m results.Measurement) float64 { return m.P50 },
		"p90": func(m results.Measurement) float64 { return m.P90 },
		"p99": func(m results.Measurement) float64 { return m.P99 },
	}
	for _, p := range t.Phases {
		for _, q := range t.Percentiles {
			rows = append(rows, get(p+" "+q, percentile[q]))
		}
	}
	for _, v := range t.Values {
		rows = append(rows, get(v, percentile["p99"]))
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

// CheckSameGangs fails unless every run of every side asked its
// scheduler for the same gang (minMember and minResources of its
// PodGroups), passed, and measured the same number of gangs. A side whose
// scheduler cannot express minResources (Kubernetes' native gangs)
// records minMember only and is held to that.
func (t Table) CheckSameGangs(runs map[string][]*results.Results) error {
	var problems []string
	want := map[string]float64{}
	for _, s := range t.Sides {
		w := s.Key
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
				case !ok && name != "gang_min_member" && name != "clusters" && got["gang_min_member"] > 0 && t.minMemberOnly(w):
					// The native gang asks for a count only.
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
		return fmt.Errorf("the sides did not measure the same gangs: %s", strings.Join(problems, "; "))
	}
	return nil
}

// minMemberOnly says whether side is Kubernetes' native gangs, whose
// PodGroup has a count and no minResources.
func (t Table) minMemberOnly(side string) bool { return side == nativeSide }

// Print writes the table: each side's range over the rounds and the
// ratios of the medians with their intervals.
func (t Table) Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header(), "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(t.cells(r), "\t"))
	}
	_ = tw.Flush()
}

// Markdown is the table as Markdown, for the report and the docs.
func (t Table) Markdown(rows []Row) string {
	var b strings.Builder
	h := t.header()
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(t.cells(r), " | "))
	}
	return b.String()
}

func (t Table) header() []string {
	h := []string{"MEASUREMENT", "UNIT"}
	for _, s := range t.Sides {
		h = append(h, s.Label)
	}
	for _, q := range t.Ratios {
		h = append(h, t.label(q.Num)+" / "+t.label(q.Den))
	}
	return h
}

func (t Table) label(key string) string {
	for _, s := range t.Sides {
		if s.Key == key {
			return s.Label
		}
	}
	return key
}

// cells are a row's columns: measurement, unit, each side's range and
// the ratios.
func (t Table) cells(r Row) []string {
	c := []string{r.Metric, r.Unit}
	for _, s := range t.Sides {
		c = append(c, span(r.Values[s.Key]))
	}
	for _, q := range t.Ratios {
		c = append(c, ratio(r.Values[q.Den], r.Values[q.Num]))
	}
	return c
}

// ratio is median(num) / median(den) with the 95% bootstrap interval
// over the rounds (each round one value a side), e.g. "1.12 [0.98, 1.30]";
// "-" where a side is missing or its median is 0.
func ratio(den, num []float64) string {
	if len(den) == 0 || len(num) == 0 {
		return "-"
	}
	md := results.MedianOf(slices.Clone(den))
	if !(md > 0) {
		return "-"
	}
	out := fmt.Sprintf("%.2f", results.MedianOf(slices.Clone(num))/md)
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
