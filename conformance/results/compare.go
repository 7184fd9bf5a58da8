package results

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// DefaultMinEffect is the smallest change compare reports as a regression
// or an improvement unless told otherwise: runs of one commit on a small
// machine differ by more than 10%.
const DefaultMinEffect = 0.15

// CompareOptions sets what counts as a regression.
type CompareOptions struct {
	// Statistic is the value each run contributes per measurement: p50,
	// p90, p99 or max; "" means p99.
	Statistic string
	// MinEffect is the smallest relative worsening that is a regression
	// (0.15 = 15%), and the smallest improvement reported as one: smaller
	// changes are unchanged however significant. 0 falls back to
	// MaxRegression, and so to 0 (every significant change counts) when
	// neither is set; the CLI's default is DefaultMinEffect.
	MinEffect float64
	// MinEffectFor overrides MinEffect per measurement key
	// ("feature/name").
	MinEffectFor map[string]float64
	// MaxRegression is MinEffect's old name, used when MinEffect is 0.
	//
	// Deprecated: use MinEffect.
	MaxRegression float64
	// Bootstrap sets the interval: confidence (default 95%), resamples
	// (default 10,000) and seed.
	Bootstrap BootstrapOptions
	// NoiseSeconds and NoiseCount are absolute changes of the median
	// always tolerated, so a 2 ms → 3 ms change on a laptop is not a
	// regression: NoiseSeconds for measurements in seconds, NoiseCount for
	// every other unit. Default 0.
	NoiseSeconds float64
	NoiseCount   float64
	// Gate, when set, names the measurements (by key, "feature/name")
	// whose regression fails the comparison; the others are still
	// compared and shown, marked not gated. Each gated measurement is
	// another chance of a false alarm: at 3 runs a side, the interval
	// excludes 0 for an unchanged measurement about 1 time in 20.
	Gate *regexp.Regexp
	// AllowMissing lets baseline measurements, features and assessments be
	// absent from current (a run that chose fewer features). Otherwise each
	// absence fails the comparison: a run that stopped measuring something
	// must not pass for one that measured it and held.
	AllowMissing bool
	// AllowDifferent compares runs that differ in scale, workload,
	// profile, scheduler or host class, between the sides or within one;
	// CompareRuns refuses them otherwise. Default false.
	AllowDifferent bool
}

// Statistics are the per-run values a comparison can use.
var Statistics = map[string]func(Measurement) float64{
	"p50": func(m Measurement) float64 { return m.P50 },
	"p90": func(m Measurement) float64 { return m.P90 },
	"p99": func(m Measurement) float64 { return m.P99 },
	"max": func(m Measurement) float64 { return m.Max },
}

// DefaultStatistic is the per-run value compared unless told otherwise.
const DefaultStatistic = "p99"

// RowVerdict is what a comparison says of one measurement.
type RowVerdict string

const (
	// RowRegressed is worse by at least the minimum effect, and the whole
	// interval on the worse side of 0 (without an interval, the change
	// alone). It fails the comparison.
	RowRegressed RowVerdict = "regressed"
	// RowImproved is the mirror image, better.
	RowImproved RowVerdict = "improved"
	// RowNotSignificant is a change of at least the minimum effect whose
	// interval includes 0: the runs disagree too much to tell.
	RowNotSignificant RowVerdict = "not significant"
	// RowUnchanged is a change smaller than the minimum effect or within the
	// noise floor, significant or not.
	RowUnchanged RowVerdict = "unchanged"
	// RowMissing is the baseline measured it, no current run did.
	RowMissing RowVerdict = "missing"
)

// Row is one measurement compared.
type Row struct {
	Key  string
	Unit string
	// HigherIsBetter is the measurement's direction: rates regress when
	// they fall, everything else when it grows.
	HigherIsBetter bool
	// BaselineRuns and CurrentRuns count the runs of each side that
	// measured it.
	BaselineRuns, CurrentRuns int
	// Baseline and Current are the medians over each side's runs of the
	// compared statistic (p99 by default).
	Baseline, Current float64
	// Change is relative, e.g. 0.25 = +25% (±Inf from a zero baseline).
	Change float64
	// Low and High bound Change's confidence interval; HasInterval is
	// false when a side has a single run.
	Low, High   float64
	HasInterval bool
	// MinEffect is the minimum effect applied to this measurement.
	MinEffect float64
	Verdict   RowVerdict
	// Note says why a large change is unchanged (the noise floor).
	Note string
	// Regressed and Missing repeat the verdict for callers that only ask
	// those two questions.
	Regressed, Missing bool
	// Gated says a regression of this row fails the comparison
	// (CompareOptions.Gate).
	Gated bool
}

// Interval is the row's interval as "[+3.0%, +41.0%]", or why there is
// none.
func (r Row) Interval() string {
	if r.HasInterval {
		return "[" + percent(r.Low) + ", " + percent(r.High) + "]"
	}
	switch {
	case r.BaselineRuns <= 1 && r.CurrentRuns <= 1:
		return "no interval (1 run a side)"
	case r.BaselineRuns <= 1:
		return "no interval (1 baseline run)"
	default:
		return "no interval (1 current run)"
	}
}

// Direction is "higher" or "lower": which way is better.
func (r Row) Direction() string {
	if r.HigherIsBetter {
		return "higher"
	}
	return "lower"
}

// Provenance is what a comparison says about where one side came from.
type Provenance struct {
	// Environment is the side's first run's.
	Environment Environment
	// StartTime is the side's earliest start, LastStartTime its latest
	// (zero for one run).
	StartTime, LastStartTime time.Time
	// Runs counts the side's runs (0 and 1 both mean one).
	Runs int
}

// FeatureOutcome is a current feature that did not pass, with why.
type FeatureOutcome struct {
	Name     string
	Status   Status // partial or failed
	Messages []string
}

// Comparison is current runs checked against baseline runs.
type Comparison struct {
	Baseline, Current Provenance
	// Test states how rows were decided, for the reader of the output.
	Test string
	// Statistic is the per-run value compared (p99 by default) and
	// Confidence the interval's level.
	Statistic  string
	Confidence float64
	// Differences are what the runs differ in that would have refused the
	// comparison, compared anyway (AllowDifferent).
	Differences []Difference
	// Rows are the baseline's measurements, by key, each with current's.
	Rows []Row
	// MissingFeatures are baseline features current lacks, by name, and
	// MissingAssessments ("feature/assessment") the baseline assessments
	// a feature both runs have lacks in current.
	MissingFeatures    []string
	MissingAssessments []string
	// NotPassed are current's features that failed or are partial (in any
	// current run), in run order. A failed one fails the comparison; a
	// partial one is only named, since the nightly job decides from each
	// run's exit code whether partial may pass.
	NotPassed    []FeatureOutcome
	AllowMissing bool
}

// Regressions counts the gated measurements that regressed.
func (c Comparison) Regressions() int {
	n := 0
	for _, r := range c.Rows {
		if r.Verdict == RowRegressed && r.Gated {
			n++
		}
	}
	return n
}

func (c Comparison) count(v RowVerdict) int {
	n := 0
	for _, r := range c.Rows {
		if r.Verdict == v {
			n++
		}
	}
	return n
}

// Missing counts the baseline measurements, features and assessments
// current lacks.
func (c Comparison) Missing() int {
	return len(c.MissingFeatures) + len(c.MissingAssessments) + c.count(RowMissing)
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

// Compare is CompareRuns for one run a side that does not refuse runs that
// differ: it lists the differences in the comparison instead.
func Compare(baseline, current *Results, opts CompareOptions) Comparison {
	opts.AllowDifferent = true
	c, _ := CompareRuns(Runs(baseline), Runs(current), opts) // never refuses
	return c
}

// CompareRuns checks every baseline measurement in the current runs, and
// that every baseline feature and assessment is in current.
//
// Each run contributes one value per measurement, its Statistic (p99 by
// default). A measurement regressed when the relative change of the median
// over the current runs against the median over the baseline runs is at
// least the minimum effect in the measurement's bad direction (larger,
// except for rates, HigherIsBetter) and the percentile bootstrap interval
// of that change (BootstrapMedianChange) lies wholly on that side of 0.
// With one run on a side there is no interval and the change alone
// decides.
//
// It refuses, with an *IncomparableError, runs that differ in scale,
// workload, profile, scheduler or host class (Differences), unless
// opts.AllowDifferent.
func CompareRuns(baseline, current []Run, opts CompareOptions) (Comparison, error) {
	if len(baseline) == 0 || len(current) == 0 {
		return Comparison{}, errors.New("compare needs at least one run a side")
	}
	diffs := Differences(baseline, current)
	if len(diffs) > 0 && !opts.AllowDifferent {
		return Comparison{}, &IncomparableError{Differences: diffs}
	}
	if opts.Statistic == "" {
		opts.Statistic = DefaultStatistic
	}
	stat, ok := Statistics[opts.Statistic]
	if !ok {
		return Comparison{}, fmt.Errorf("statistic %q: want p50, p90, p99 or max", opts.Statistic)
	}
	if opts.MinEffect == 0 {
		opts.MinEffect = opts.MaxRegression
	}
	opts.Bootstrap = opts.Bootstrap.withDefaults()
	c := Comparison{
		Baseline:     provenance(baseline),
		Current:      provenance(current),
		Test:         testStatement(opts),
		Statistic:    opts.Statistic,
		Confidence:   opts.Bootstrap.Confidence,
		Differences:  diffs,
		Rows:         compareMeasurements(baseline, current, stat, opts),
		AllowMissing: opts.AllowMissing,
	}
	baseFeatures, curFeatures := mergeFeatures(baseline), mergeFeatures(current)
	c.MissingFeatures, c.MissingAssessments = missingFeatures(baseFeatures, curFeatures)
	for _, f := range curFeatures {
		if status := FeatureStatus(f.Assessments); status != StatusPassed {
			c.NotPassed = append(c.NotPassed, FeatureOutcome{Name: f.Name, Status: status, Messages: f.Messages()})
		}
	}
	return c, nil
}

// testStatement is the test, as the output states it.
func testStatement(opts CompareOptions) string {
	return fmt.Sprintf("each run's %s; the change is that of the median over the current runs against the median over the baseline runs, "+
		"with a %s percentile bootstrap interval (runs resampled within each side, %d resamples, seed %d); "+
		"regressed = the interval wholly on the worse side of 0 and a change of at least the minimum effect "+
		"(one run a side: the change alone)",
		opts.Statistic, percent0(opts.Bootstrap.Confidence), opts.Bootstrap.Resamples, opts.Bootstrap.Seed)
}

func provenance(runs []Run) Provenance {
	p := Provenance{Environment: runs[0].Environment, StartTime: runs[0].StartTime, Runs: len(runs)}
	if len(runs) == 1 {
		return p
	}
	p.LastStartTime = runs[0].StartTime
	for _, r := range runs[1:] {
		if r.StartTime.Before(p.StartTime) {
			p.StartTime = r.StartTime
		}
		if r.StartTime.After(p.LastStartTime) {
			p.LastStartTime = r.StartTime
		}
	}
	return p
}

// mergeFeatures is the runs' features by name in first-seen order, each
// assessment with its worst outcome over the runs.
func mergeFeatures(runs []Run) []Feature {
	features := map[string]*Feature{}
	var order []string
	for _, r := range runs {
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
	}
	out := make([]Feature, 0, len(order))
	for _, name := range order {
		f := *features[name]
		f.Status = FeatureStatus(f.Assessments)
		out = append(out, f)
	}
	return out
}

// valuesByKey is each measurement key's values over runs (one per run
// that has it), with the first measurement of each key.
func valuesByKey(runs []Run, stat func(Measurement) float64) (map[string][]float64, map[string]Measurement) {
	vals, first := map[string][]float64{}, map[string]Measurement{}
	for _, r := range runs {
		for _, m := range r.Measurements {
			if _, ok := first[m.Key()]; !ok {
				first[m.Key()] = m
			}
			vals[m.Key()] = append(vals[m.Key()], stat(m))
		}
	}
	return vals, first
}

func compareMeasurements(baseline, current []Run, stat func(Measurement) float64, opts CompareOptions) []Row {
	base, first := valuesByKey(baseline, stat)
	cur, _ := valuesByKey(current, stat)
	var rows []Row
	for key, b := range base {
		m := first[key]
		row := Row{Key: key, Unit: m.Unit, HigherIsBetter: HigherIsBetter(m.Unit), BaselineRuns: len(b), MinEffect: opts.MinEffect,
			Gated: opts.Gate == nil || opts.Gate.MatchString(key)}
		if v, ok := opts.MinEffectFor[key]; ok {
			row.MinEffect = v
		}
		row.Baseline = MedianOf(slices.Clone(b))
		c := cur[key]
		if len(c) == 0 {
			row.Verdict, row.Missing = RowMissing, true
			rows = append(rows, row)
			continue
		}
		row.CurrentRuns = len(c)
		row.Current = MedianOf(slices.Clone(c))
		row.Change = relativeChange(row.Baseline, row.Current)
		row.Low, row.High, row.HasInterval = BootstrapMedianChange(b, c, opts.Bootstrap)
		noise := opts.NoiseCount
		if m.Unit == "seconds" {
			noise = opts.NoiseSeconds
		}
		row.Verdict, row.Note = decide(row, noise)
		row.Regressed = row.Verdict == RowRegressed
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows
}

// decide is a row's verdict. worse is the change in the bad direction, so
// a regression is always worse > 0, whichever way the measurement goes.
func decide(r Row, noise float64) (RowVerdict, string) {
	worse, low, high := r.Change, r.Low, r.High
	if r.HigherIsBetter {
		worse, low, high = -r.Change, -r.High, -r.Low
	}
	switch {
	case math.Abs(r.Current-r.Baseline) <= noise:
		return RowUnchanged, "within the noise floor"
	case math.Abs(worse) < r.MinEffect:
		return RowUnchanged, ""
	case !r.HasInterval && worse > 0:
		return RowRegressed, ""
	case !r.HasInterval:
		return RowImproved, ""
	case worse > 0 && low > 0:
		return RowRegressed, ""
	case worse < 0 && high < 0:
		return RowImproved, ""
	default:
		return RowNotSignificant, ""
	}
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
