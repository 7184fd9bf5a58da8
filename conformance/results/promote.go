package results

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
)

// PromoteOptions sets which runs may become a baseline.
type PromoteOptions struct {
	// AllowPartial accepts a PARTIAL run (some assessment skipped), for a
	// cluster that can never run every assessment.
	AllowPartial bool
	// AllowDifferent accepts (PromoteRuns) runs that differ in scale,
	// workload, profile, scheduler or host class, which compare would then
	// refuse to compare with each other. Default false.
	AllowDifferent bool
}

// ErrNoMeasurements is a run that measured nothing, so a baseline made from
// it would let every later run pass.
var ErrNoMeasurements = errors.New("the run has no measurements to compare against")

// Promote makes a run a baseline: it refuses a FAILED run (naming its
// failed features), a PARTIAL one unless opts.AllowPartial, and one with no
// measurements. The baseline is a copy without Timelines, since
// comparisons use measurements and timelines are bulky.
func Promote(src *Results, opts PromoteOptions) (*Results, error) {
	if src == nil {
		return nil, errors.New("no run to promote")
	}
	switch src.RunVerdict() {
	case VerdictPassed:
	case VerdictPartial:
		if !opts.AllowPartial {
			return nil, fmt.Errorf("the run is PARTIAL (%s not passed); allow partial runs to promote it anyway", strings.Join(featuresWith(src.Features, StatusPartial), ", "))
		}
	default:
		failed := featuresWith(src.Features, StatusFailed)
		if len(failed) == 0 {
			return nil, errors.New("the run is FAILED: it has no features")
		}
		return nil, fmt.Errorf("the run is FAILED: %s failed", strings.Join(failed, ", "))
	}
	if len(src.Measurements) == 0 {
		return nil, ErrNoMeasurements
	}
	out := *src
	out.Timelines, out.TimelineOrigins = nil, nil
	out.Features = cloneFeatures(src.Features)
	out.Measurements = append([]Measurement(nil), src.Measurements...)
	out.Environment.GPUsByProduct = maps.Clone(src.Environment.GPUsByProduct)
	out.Finalize()
	return &out, nil
}

func featuresWith(fs []Feature, status Status) []string {
	var names []string
	for _, f := range fs {
		if FeatureStatus(f.Assessments) == status {
			names = append(names, f.Name)
		}
	}
	return names
}

// cloneFeatures copies features deep enough that changing the baseline
// does not change the run it came from.
func cloneFeatures(fs []Feature) []Feature {
	if fs == nil {
		return nil
	}
	out := make([]Feature, len(fs))
	for i, f := range fs {
		f.Labels = maps.Clone(f.Labels)
		as := make([]Assessment, len(f.Assessments))
		for j, a := range f.Assessments {
			a.Messages = append([]string(nil), a.Messages...)
			as[j] = a
		}
		f.Assessments = as
		out[i] = f
	}
	return out
}

// PromoteRuns makes several runs one baseline set, each run promoted by
// Promote. It refuses merged results (a median: the set must hold runs,
// whose spread is what compare weighs a change against) and runs that
// differ in what compare requires to match (Differences), unless
// opts.AllowDifferent. Every refusal is named, with its run's path.
func PromoteRuns(runs []Run, opts PromoteOptions) ([]*Results, error) {
	if len(runs) == 0 {
		return nil, errors.New("no runs to promote")
	}
	var errs []error
	out := make([]*Results, 0, len(runs))
	for _, r := range runs {
		if r.Results != nil && r.Environment.MergedRuns > 0 {
			errs = append(errs, fmt.Errorf("%s: a median of %d runs, not a run; promote the runs themselves", r.Path, r.Environment.MergedRuns))
			continue
		}
		base, err := Promote(r.Results, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Path, err))
			continue
		}
		out = append(out, base)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if diffs := Differences(runs, nil); len(diffs) > 0 && !opts.AllowDifferent {
		return nil, &IncomparableError{Differences: diffs}
	}
	return out, nil
}

// BaselineManifestFile names the manifest of a baseline directory.
const BaselineManifestFile = "baseline.json"

// BaselineManifest says when a baseline set was promoted, from which
// commit and from which runs. It is written beside the runs, which a
// baseline directory holds as run-<i>/results.json.
type BaselineManifest struct {
	PromotedAt time.Time `json:"promotedAt"`
	// Commit is the suite commit the runs recorded, when they agree
	// (empty otherwise; each run names its own).
	Commit string        `json:"commit,omitempty"`
	Runs   []BaselineRun `json:"runs"`
}

// BaselineRun is one run of a baseline set.
type BaselineRun struct {
	// Path is the run's results.json, relative to the baseline directory.
	Path string `json:"path"`
	// From is where it was promoted from.
	From           string    `json:"from"`
	Verdict        Verdict   `json:"verdict"`
	StartTime      time.Time `json:"startTime"`
	SuiteCommit    string    `json:"suiteCommit,omitempty"`
	OperatorCommit string    `json:"operatorCommit,omitempty"`
}

// NewBaselineManifest describes runs promoted at now; paths are where each
// is written, relative to the baseline directory.
func NewBaselineManifest(runs []Run, paths []string, now time.Time) BaselineManifest {
	m := BaselineManifest{PromotedAt: now.UTC()}
	commits := map[string]bool{}
	for i, r := range runs {
		e := r.Environment
		m.Runs = append(m.Runs, BaselineRun{Path: paths[i], From: r.Path, Verdict: r.Verdict, StartTime: r.StartTime,
			SuiteCommit: e.SuiteCommit, OperatorCommit: e.OperatorCommit})
		commits[e.SuiteCommit] = true
	}
	if len(commits) == 1 {
		m.Commit = runs[0].Environment.SuiteCommit
	}
	return m
}
