package results

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// CompareOptions sets what counts as a regression.
type CompareOptions struct {
	// MaxRegression is the allowed relative worsening of p99 (0.10 = 10%):
	// growth, or for a rate a fall.
	MaxRegression float64
	// NoiseSeconds and NoiseCount are absolute growths always tolerated, so
	// a 2 ms → 3 ms change on a laptop is not a regression.
	NoiseSeconds float64
	NoiseCount   float64
	// AllowMissing lets baseline measurements, features and assessments be
	// absent from current (a run that chose fewer features). Otherwise each
	// absence fails the comparison: a run that stopped measuring something
	// must not pass for one that measured it and held.
	AllowMissing bool
}

// Row is one measurement compared.
type Row struct {
	Key                string
	Unit               string
	Baseline, Current  float64
	Change             float64 // relative, e.g. 0.25 = +25%
	Regressed, Missing bool
}

// Provenance is what a comparison says about where one side came from.
type Provenance struct {
	Environment Environment
	StartTime   time.Time
}

// FeatureOutcome is a current feature that did not pass, with why.
type FeatureOutcome struct {
	Name     string
	Status   Status // partial or failed
	Messages []string
}

// Comparison is a current run checked against a baseline.
type Comparison struct {
	Baseline, Current Provenance
	// Rows are the baseline's measurements, by key, each with current's.
	Rows []Row
	// MissingFeatures are baseline features current lacks, by name, and
	// MissingAssessments ("feature/assessment") the baseline assessments
	// a feature both runs have lacks in current.
	MissingFeatures    []string
	MissingAssessments []string
	// NotPassed are current's features that failed or are partial, in run
	// order. A failed one fails the comparison; a partial one is only
	// named, since the nightly job decides from each run's exit code
	// whether partial may pass.
	NotPassed    []FeatureOutcome
	AllowMissing bool
}

// Regressions counts the measurements whose p99 grew past the options.
func (c Comparison) Regressions() int {
	n := 0
	for _, r := range c.Rows {
		if r.Regressed {
			n++
		}
	}
	return n
}

// Missing counts the baseline measurements, features and assessments
// current lacks.
func (c Comparison) Missing() int {
	n := len(c.MissingFeatures) + len(c.MissingAssessments)
	for _, r := range c.Rows {
		if r.Missing {
			n++
		}
	}
	return n
}

// FailedFeatures counts current's failed features.
func (c Comparison) FailedFeatures() int {
	n := 0
	for _, f := range c.NotPassed {
		if f.Status == StatusFailed {
			n++
		}
	}
	return n
}

// Failed says whether current is worse than the baseline: a regression, a
// failed feature, or (unless AllowMissing) anything missing.
func (c Comparison) Failed() bool {
	return c.Regressions() > 0 || c.FailedFeatures() > 0 || (!c.AllowMissing && c.Missing() > 0)
}

// Compare checks every baseline measurement's p99 in current, and that
// every baseline feature and assessment is in current. Larger is worse,
// except for rates (HigherIsBetter).
func Compare(baseline, current *Results, opts CompareOptions) Comparison {
	c := Comparison{
		Baseline:     Provenance{Environment: baseline.Environment, StartTime: baseline.StartTime},
		Current:      Provenance{Environment: current.Environment, StartTime: current.StartTime},
		Rows:         compareMeasurements(baseline.Measurements, current.Measurements, opts),
		AllowMissing: opts.AllowMissing,
	}
	c.MissingFeatures, c.MissingAssessments = missingFeatures(baseline.Features, current.Features)
	for _, f := range current.Features {
		if status := FeatureStatus(f.Assessments); status != StatusPassed {
			c.NotPassed = append(c.NotPassed, FeatureOutcome{Name: f.Name, Status: status, Messages: f.Messages()})
		}
	}
	return c
}

func compareMeasurements(baseline, current []Measurement, opts CompareOptions) []Row {
	cur := map[string]Measurement{}
	for _, m := range current {
		cur[m.Key()] = m
	}
	var rows []Row
	for _, b := range baseline {
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
		// How much worse current is: it grew, or for a rate it fell.
		worse := c.P99 - b.P99
		if HigherIsBetter(b.Unit) {
			worse = -worse
		}
		row.Regressed = worse > noise && worse > b.P99*opts.MaxRegression
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows
}

// HigherIsBetter says whether a unit is a rate (gangs/s), which regresses
// when it falls; every other unit the suite records (seconds, requests,
// bytes, counts) regresses when it grows.
func HigherIsBetter(unit string) bool { return strings.HasSuffix(unit, "/s") }

// missingFeatures lists the baseline features current lacks, and the
// baseline assessments of the features both have that current lacks. An
// assessment of a missing feature is not listed again.
func missingFeatures(baseline, current []Feature) (features, assessments []string) {
	cur := map[string]map[string]bool{}
	for _, f := range current {
		names := cur[f.Name]
		if names == nil {
			names = map[string]bool{}
			cur[f.Name] = names
		}
		for _, a := range f.Assessments {
			names[a.Name] = true
		}
	}
	for _, f := range baseline {
		names, ok := cur[f.Name]
		if !ok {
			features = append(features, f.Name)
			continue
		}
		for _, a := range f.Assessments {
			// A v1 baseline recorded features, not assessments.
			if a.Name != V1Assessment && !names[a.Name] {
				assessments = append(assessments, f.Name+"/"+a.Name)
			}
		}
	}
	sort.Strings(features)
	sort.Strings(assessments)
	return features, assessments
}

// PrintComparison writes where both sides came from, the measurements as a
// table, what is missing and which current features did not pass, and a
// last line with the outcome. It returns whether the comparison failed.
func PrintComparison(w io.Writer, c Comparison) (failed bool) {
	fmt.Fprintf(w, "baseline: %s\n", c.Baseline)
	fmt.Fprintf(w, "current:  %s\n\n", c.Current)
	missing := "MISSING"
	if c.AllowMissing {
		missing = "missing (allowed)"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tUNIT\tBASELINE p99\tCURRENT p99\tCHANGE\tVERDICT")
	for _, r := range c.Rows {
		switch {
		case r.Missing:
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t%s\n", r.Key, r.Unit, num(r.Baseline), missing)
		case r.Regressed:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%+.1f%%\tREGRESSION\n", r.Key, r.Unit, num(r.Baseline), num(r.Current), r.Change*100)
		default:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%+.1f%%\tok\n", r.Key, r.Unit, num(r.Baseline), num(r.Current), r.Change*100)
		}
	}
	_ = tw.Flush()
	for _, f := range c.MissingFeatures {
		fmt.Fprintf(w, "feature %s: %s\n", f, missing)
	}
	for _, a := range c.MissingAssessments {
		fmt.Fprintf(w, "assessment %s: %s\n", a, missing)
	}
	for _, f := range c.NotPassed {
		fmt.Fprintf(w, "feature %s %s: %s\n", f.Name, f.Status, strings.Join(f.Messages, "; "))
	}
	failed = c.Failed()
	if failed {
		allowed := ""
		if c.AllowMissing {
			allowed = " (allowed)"
		}
		fmt.Fprintf(w, "comparison: FAILED (%d regressed, %d missing%s, %d failed features)\n",
			c.Regressions(), c.Missing(), allowed, c.FailedFeatures())
	} else {
		fmt.Fprintln(w, "comparison: ok")
	}
	return failed
}

// String is one line naming the run: profile, cluster, suite and operator
// builds, and start, each "unknown" where the run did not record it.
func (p Provenance) String() string {
	e := p.Environment
	start := "unknown"
	if !p.StartTime.IsZero() {
		start = p.StartTime.UTC().Format(time.RFC3339)
	}
	workload := e.WorkloadName()
	return fmt.Sprintf("profile %s, workload %s, cluster %s, suite %s (commit %s), operator %s (commit %s), started %s",
		orUnknown(e.Profile), workload, orUnknown(e.ClusterName), orUnknown(e.SuiteVersion), orUnknown(e.SuiteCommit),
		orUnknown(e.OperatorVersion), orUnknown(e.OperatorCommit), start)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
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
			// Of an even count, the mean of the two middle values: the
			// lower one alone would favour the faster half of the runs.
			mid := len(vals) / 2
			if len(vals)%2 == 0 {
				return (vals[mid-1] + vals[mid]) / 2
			}
			return vals[mid]
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
