package results

// Median merges repeated runs into one: each measurement's percentiles are
// the median over the runs that have it, and each assessment keeps its
// worst outcome over the runs (failed over skipped over passed), so a
// feature passes only if it passed in every run. The merged results record
// how many runs they merged (MergedRuns). They are for reports, dashboards
// and PerfData; compare takes the runs themselves, since their spread is
// what tells a regression from noise.
func Median(runs []*Results) *Results {
	if len(runs) == 0 {
		return nil
	}
	out := *runs[0]
	out.Features, out.Measurements, out.Evidence = nil, nil, nil
	out.Environment.MergedRuns = 0
	byKey := map[string][]Measurement{}
	var keys []string
	for _, r := range runs {
		out.Environment.MergedRuns += max(r.Environment.MergedRuns, 1)
		// The merged run spans all of them, in whatever order they came.
		if r.StartTime.Before(out.StartTime) {
			out.StartTime = r.StartTime
		}
		if r.EndTime.After(out.EndTime) {
			out.EndTime = r.EndTime
		}
		for _, m := range r.Measurements {
			if _, seen := byKey[m.Key()]; !seen {
				keys = append(keys, m.Key())
			}
			byKey[m.Key()] = append(byKey[m.Key()], m)
		}
	}
	out.Features = mergeFeatures(Runs(runs...))
	for _, k := range keys {
		ms := byKey[k]
		med := func(get func(Measurement) float64) float64 {
			vals := make([]float64, len(ms))
			for i, m := range ms {
				vals[i] = get(m)
			}
			// Of an even count, the mean of the two middle values: the
			// lower one alone would favour the faster half of the runs.
			return MedianOf(vals)
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
