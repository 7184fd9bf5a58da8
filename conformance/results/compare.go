package results

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// CompareOptions sets what counts as a regression.
type CompareOptions struct {
	// MaxRegression is the allowed relative growth of p99 (0.10 = 10%).
	MaxRegression float64
	// NoiseSeconds and NoiseCount are absolute growths always tolerated, so
	// a 2 ms → 3 ms change on a laptop is not a regression.
	NoiseSeconds float64
	NoiseCount   float64
}

// Row is one measurement compared.
type Row struct {
	Key                string
	Unit               string
	Baseline, Current  float64
	Change             float64 // relative, e.g. 0.25 = +25%
	Regressed, Missing bool
}

// Compare checks every baseline measurement's p99 in current. Larger is
// worse for every unit the suite records (seconds, requests, conflicts).
func Compare(baseline, current *Results, opts CompareOptions) []Row {
	cur := map[string]Measurement{}
	for _, m := range current.Measurements {
		cur[m.Key()] = m
	}
	var rows []Row
	for _, b := range baseline.Measurements {
		row := Row{Key: b.Key(), Unit: b.Unit, Baseline: b.P99}
		c, ok := cur[b.Key()]
		if !ok {
			row.Missing = true
			rows = append(rows, row)
			continue
		}
		row.Current = c.P99
		if b.P99 != 0 {
			row.Change = (c.P99 - b.P99) / b.P99
		}
		noise := opts.NoiseCount
		if b.Unit == "seconds" {
			noise = opts.NoiseSeconds
		}
		grew := c.P99 - b.P99
		row.Regressed = grew > noise && grew > b.P99*opts.MaxRegression
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows
}

// PrintComparison writes the rows as a table and says whether any regressed.
func PrintComparison(w io.Writer, rows []Row) (regressed bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tUNIT\tBASELINE p99\tCURRENT p99\tCHANGE\tVERDICT")
	for _, r := range rows {
		verdict := "ok"
		switch {
		case r.Missing:
			verdict = "missing"
		case r.Regressed:
			verdict, regressed = "REGRESSION", true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%+.1f%%\t%s\n", r.Key, r.Unit, num(r.Baseline), num(r.Current), r.Change*100, verdict)
	}
	_ = tw.Flush()
	return regressed
}

// Median merges repeated runs into one: each measurement's percentiles are
// the median over the runs that have it, and each assessment keeps its
// worst outcome over the runs (failed over skipped over passed), so a
// feature passes only if it passed in every run. Nightly jobs compare this
// against the baseline, so one noisy run neither hides nor fakes a
// regression.
func Median(runs []*Results) *Results {
	if len(runs) == 0 {
		return nil
	}
	out := *runs[0]
	out.Features, out.Measurements, out.Evidence = nil, nil, nil
	features := map[string]*Feature{}
	var order []string
	byKey := map[string][]Measurement{}
	var keys []string
	for _, r := range runs {
		// The merged run spans all of them, in whatever order they came.
		if r.StartTime.Before(out.StartTime) {
			out.StartTime = r.StartTime
		}
		if r.EndTime.After(out.EndTime) {
			out.EndTime = r.EndTime
		}
		for _, f := range r.Features {
			merged, ok := features[f.Name]
			if !ok {
				copied := f
				copied.Assessments = nil
				merged = &copied
				features[f.Name] = merged
				order = append(order, f.Name)
			}
			for _, a := range f.Assessments {
				mergeAssessment(merged, a)
			}
		}
		for _, m := range r.Measurements {
			if _, seen := byKey[m.Key()]; !seen {
				keys = append(keys, m.Key())
			}
			byKey[m.Key()] = append(byKey[m.Key()], m)
		}
	}
	for _, name := range order {
		out.Features = append(out.Features, *features[name])
	}
	for _, k := range keys {
		ms := byKey[k]
		med := func(get func(Measurement) float64) float64 {
			vals := make([]float64, len(ms))
			for i, m := range ms {
				vals[i] = get(m)
			}
			sort.Float64s(vals)
			return vals[(len(vals)-1)/2]
		}
		m := ms[0]
		m.P50 = med(func(m Measurement) float64 { return m.P50 })
		m.P90 = med(func(m Measurement) float64 { return m.P90 })
		m.P99 = med(func(m Measurement) float64 { return m.P99 })
		m.Max = med(func(m Measurement) float64 { return m.Max })
		out.Measurements = append(out.Measurements, m)
	}
	out.Finalize()
	return &out
}

// mergeAssessment adds one run's outcome of an assessment to f: the worst
// outcome wins, with its reason, and every run's failures are kept.
func mergeAssessment(f *Feature, a Assessment) {
	for i := range f.Assessments {
		m := &f.Assessments[i]
		if m.Name != a.Name {
			continue
		}
		if rank(a.Status) > rank(m.Status) {
			m.Status, m.Reason = a.Status, a.Reason
		}
		m.Messages = append(m.Messages, a.Messages...)
		return
	}
	a.Messages = append([]string(nil), a.Messages...)
	f.Assessments = append(f.Assessments, a)
}

func rank(s Status) int {
	switch s {
	case StatusPassed:
		return 0
	case StatusSkipped:
		return 1
	default:
		return 2
	}
}
