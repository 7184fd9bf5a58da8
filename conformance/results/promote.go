package results

import (
	"errors"
	"fmt"
	"maps"
	"strings"
)

// PromoteOptions sets which runs may become a baseline.
type PromoteOptions struct {
	// AllowPartial accepts a PARTIAL run (some assessment skipped), for a
	// cluster that can never run every assessment.
	AllowPartial bool
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
	switch RunVerdict(src.Features, src.Requested...) {
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
