package sidebyside

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gpulab/gpulab/conformance/results"
)

// autoscalingFeatureName is the suite's feature the comparison runs.
const autoscalingFeatureName = "autoscaling"

// autoscalingAssessments are the feature's assessments, by the start of
// their names (as --assess selects them), and their columns.
var autoscalingAssessments = []struct{ prefix, label string }{
	{"a gang larger than the free nodes", "scale-up"},
	{"a gang no NodePool can fit", "too big: no node"},
	{"an emptied node goes", "scale-down"},
}

// autoscalingTimes are the feature's times (seconds) the report shows per
// pair, and compares between pairs.
var autoscalingTimes = []struct{ name, label string }{
	{"create_to_first_node", "create→first node"},
	{"create_to_nodes_ready", "create→all nodes Ready"},
	{"create_to_all_bound", "create→gang bound"},
	{"create_to_ready", "create→gang Ready"},
	{"delete_to_nodes_gone", "scale-down: delete→node gone"},
}

// partlyBound is in the failure the recorder's judgement gives a gang
// seen partly bound (measure.Violation).
const partlyBound = "partly bound"

// AutoscalingReport is what an autoscaling comparison renders: every
// pair, its counted runs and, for a pair that could not run the feature,
// the finding that says why.
type AutoscalingReport struct {
	// Pairs are the rows, in order; the first with runs is the reference
	// of the ratios.
	Pairs []AutoscalingPair
	// Runs are each pair's counted runs, by AutoscalingPair.Key.
	Runs map[string][]*results.Results
	// Findings say, by key, why a pair has no runs.
	Findings map[string]string
}

// Markdown is the report's tables and findings as Markdown.
func (r AutoscalingReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Per stack and workload\n\n%s", markdownTable(r.summary()))
	if rows := r.ratios(); rows != nil {
		fmt.Fprintf(&b, "\n## Against %s (ratio of the medians)\n\n%s", r.reference().Label(), markdownTable(rows))
	}
	fmt.Fprintf(&b, "\n## Verdicts\n\n%s", markdownTable(r.verdicts()))
	if f := r.findings(); len(f) > 0 {
		fmt.Fprintf(&b, "\n## Findings: pairs that cannot run the feature\n\n")
		for _, line := range f {
			fmt.Fprintf(&b, "- %s\n", line)
		}
	}
	return b.String()
}

// Print writes the same tables as text.
func (r AutoscalingReport) Print(w io.Writer) {
	printTable(w, r.summary())
	if rows := r.ratios(); rows != nil {
		fmt.Fprintf(w, "\nagainst %s (ratio of the medians):\n", r.reference().Label())
		printTable(w, rows)
	}
	fmt.Fprintln(w)
	printTable(w, r.verdicts())
	if f := r.findings(); len(f) > 0 {
		fmt.Fprintln(w, "\nfindings: pairs that cannot run the feature")
		for _, line := range f {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
}

// summary is one row per pair: whether it scaled up, the times, the
// nodes, and whether a gang was seen partly bound.
func (r AutoscalingReport) summary() [][]string {
	h := []string{"stack, workload", "runs", "scaled up for the gang"}
	for _, c := range autoscalingTimes {
		h = append(h, c.label+" (s)")
	}
	rows := [][]string{append(h, "nodes added of needed", "extra nodes", "partial binding seen")}
	for _, p := range r.Pairs {
		runs := r.Runs[p.Key()]
		row := []string{p.Label(), fmt.Sprint(len(runs))}
		if _, found := r.Findings[p.Key()]; found {
			row[1] = "not run (finding)"
		}
		if len(runs) == 0 {
			rows = append(rows, append(row, slices.Repeat([]string{"-"}, len(rows[0])-2)...))
			continue
		}
		row = append(row, scaledUp(runs))
		for _, c := range autoscalingTimes {
			row = append(row, medianSpan(autoscalingValues(runs, c.name), len(runs)))
		}
		added := medianSpan(autoscalingValues(runs, "nodes_added"), len(runs))
		if needed := autoscalingValues(runs, "nodes_needed"); len(needed) > 0 {
			added += " of " + span(needed)
		}
		rows = append(rows, append(row, added, medianSpan(autoscalingValues(runs, "extra_nodes"), len(runs)), partialSeen(runs)))
	}
	return rows
}

// reference is the first pair with runs: the ratios' denominator.
func (r AutoscalingReport) reference() AutoscalingPair {
	for _, p := range r.Pairs {
		if len(r.Runs[p.Key()]) > 0 {
			return p
		}
	}
	return AutoscalingPair{}
}

// ratios compare every other pair with runs to the reference, time by
// time; nil when fewer than two pairs ran.
func (r AutoscalingReport) ratios() [][]string {
	ref := r.reference()
	h := []string{"stack, workload"}
	for _, c := range autoscalingTimes {
		h = append(h, c.label)
	}
	rows := [][]string{h}
	for _, p := range r.Pairs {
		runs := r.Runs[p.Key()]
		if p.Key() == ref.Key() || len(runs) == 0 {
			continue
		}
		row := []string{p.Label()}
		for _, c := range autoscalingTimes {
			row = append(row, ratio(autoscalingValues(r.Runs[ref.Key()], c.name), autoscalingValues(runs, c.name)))
		}
		rows = append(rows, row)
	}
	if len(rows) == 1 {
		return nil
	}
	return rows
}

// verdicts are each assessment's statuses over a pair's runs, e.g.
// "passed 2/3, failed 1/3", with the first reason it did not pass.
func (r AutoscalingReport) verdicts() [][]string {
	h := []string{"stack, workload"}
	for _, a := range autoscalingAssessments {
		h = append(h, a.label)
	}
	rows := [][]string{h}
	for _, p := range r.Pairs {
		runs := r.Runs[p.Key()]
		if len(runs) == 0 {
			continue
		}
		row := []string{p.Label()}
		for _, a := range autoscalingAssessments {
			count, first := map[string]int{}, ""
			for _, run := range runs {
				as, ok := assessment(run, a.prefix)
				if !ok {
					count["not run"]++
					continue
				}
				count[string(as.Status)]++
				if first == "" && as.Status != results.StatusPassed {
					first = as.Reason
				}
			}
			cell := counted(count, len(runs))
			if first != "" {
				cell += " (" + first + ")"
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	return rows
}

// findings are the pairs without runs and why, in row order.
func (r AutoscalingReport) findings() []string {
	var out []string
	for _, p := range r.Pairs {
		if why, ok := r.Findings[p.Key()]; ok {
			out = append(out, p.Label()+": "+why)
		}
	}
	return out
}

// autoscalingValues are the runs' values of one of the feature's
// measurements (single values), in run order, where measured.
func autoscalingValues(runs []*results.Results, name string) []float64 {
	var vs []float64
	for _, r := range runs {
		if v, ok := autoscalingValue(r, name); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

func autoscalingValue(r *results.Results, name string) (float64, bool) {
	for _, m := range r.Measurements {
		if m.Feature == autoscalingFeatureName && m.Name == name {
			return m.P50, true
		}
	}
	return 0, false
}

// assessment finds the run's autoscaling assessment whose name starts
// with prefix.
func assessment(r *results.Results, prefix string) (results.Assessment, bool) {
	for _, f := range r.Features {
		if f.Name != autoscalingFeatureName {
			continue
		}
		for _, a := range f.Assessments {
			if strings.HasPrefix(a.Name, prefix) {
				return a, true
			}
		}
	}
	return results.Assessment{}, false
}

// scaledUp says per run whether the autoscaler added a node for the
// scale-up gang: yes or no (nodes_added), else the gang was not Ready
// (the assessment failed before measuring; its reason is in the
// verdicts) or the scale-up was skipped.
func scaledUp(runs []*results.Results) string {
	count := map[string]int{}
	for _, r := range runs {
		a, _ := assessment(r, autoscalingAssessments[0].prefix)
		switch added, ok := autoscalingValue(r, "nodes_added"); {
		case ok && added > 0:
			count["yes"]++
		case ok:
			count["no"]++
		case a.Status == results.StatusSkipped:
			count["skipped"]++
		default:
			count["gang not Ready"]++
		}
	}
	return counted(count, len(runs))
}

// partialSeen says in how many runs a gang of the feature was seen
// partly bound ("yes 1/3, no 2/3"), of the runs that got as far as the
// judgement (a gang Ready and measured); "-" where none did.
func partialSeen(runs []*results.Results) string {
	checked, seen := 0, 0
	for _, r := range runs {
		_, up := autoscalingValue(r, "nodes_added")
		_, down := autoscalingValue(r, "delete_to_nodes_gone")
		partial := false
		for _, f := range r.Features {
			if f.Name != autoscalingFeatureName {
				continue
			}
			for _, m := range f.Messages() {
				partial = partial || strings.Contains(m, partlyBound)
			}
		}
		if up || down || partial {
			checked++
		}
		if partial {
			seen++
		}
	}
	if checked == 0 {
		return "-"
	}
	return counted(map[string]int{"yes": seen, "no": checked - seen}, checked)
}

// counted renders outcome counts as "a n/N, b m/N", alphabetically,
// leaving out those of none.
func counted(count map[string]int, n int) string {
	var parts []string
	for k, c := range count {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%s %d/%d", k, c, n))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// medianSpan is the median of a measurement over the rounds with its
// range where the rounds differ, "12.3 (10.1–14.2)", and in how many of the runs it was measured
// when not all.
func medianSpan(vs []float64, runs int) string {
	if len(vs) == 0 {
		return "-"
	}
	out := num(results.MedianOf(slices.Clone(vs)))
	if r := span(vs); strings.Contains(r, "–") {
		out += " (" + r + ")"
	}
	if len(vs) < runs {
		out += fmt.Sprintf(" in %d/%d", len(vs), runs)
	}
	return out
}

// markdownTable renders rows, the first the header, as Markdown.
func markdownTable(rows [][]string) string {
	var b strings.Builder
	for i, row := range rows {
		cells := make([]string, len(row))
		for j, c := range row {
			cells[j] = strings.ReplaceAll(c, "|", "/")
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
		if i == 0 {
			fmt.Fprintf(&b, "|%s\n", strings.Repeat("---|", len(row)))
		}
	}
	return b.String()
}

// printTable writes rows, the first the header, in aligned columns.
func printTable(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}
