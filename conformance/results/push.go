package results

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
)

// PushJob is the Pushgateway job the suite's series are grouped under.
const PushJob = "gpulab_conformance"

// Push sends a run's verdicts and measurements to a Prometheus Pushgateway,
// grouped by profile, cluster (PushCluster) and workload, replacing that
// cluster's previous run of that profile and workload and no other: two
// clusters running the same profile, or two workloads on one cluster, each
// keep their own series.
//
//	gpulab_conformance_verdict{verdict}                   1 for the run's verdict (PASSED, PARTIAL, FAILED), 0 for the others
//	gpulab_conformance_feature_passed{feature}            1 if every assessment passed, else 0
//	gpulab_conformance_feature_status{feature,status}     1 for its status (passed, partial, failed), 0 for the others
//	gpulab_conformance_requirement_status{requirement,kar,status}  1 for its evidence status (passed, partial, failed, not_tested)
//	gpulab_conformance_feature_duration_seconds{feature}
//	gpulab_conformance_measurement{feature,name,unit,quantile}  (quantile 0.5, 0.9, 0.99, 1)
//	gpulab_conformance_measurement_samples{feature,name,unit}
//	gpulab_conformance_passed                             1 when the verdict is PASSED
//	gpulab_conformance_last_run_timestamp_seconds
//	gpulab_conformance_baseline{feature,name,unit,quantile,bound}  with baseline runs: bound low and high
//	                                                      are the lowest and highest value of that quantile over them
//
// The baseline series let the dashboard draw each measurement's trend
// inside the band the baseline runs spanned.
func Push(ctx context.Context, url string, r *Results, baseline ...*Results) error {
	reg := prometheus.NewRegistry()
	verdict := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_verdict", Help: "1 for the last run's verdict, 0 for the other verdicts."}, []string{"verdict"})
	featureStatus := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_feature_status", Help: "1 for the feature's status in the last run, 0 for the other statuses."}, []string{"feature", "status"})
	requirement := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_requirement_status", Help: "1 for the AI-conformance requirement's evidence status in the last run, 0 for the others."}, []string{"requirement", "kar", "status"})
	passed := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_feature_passed", Help: "1 if every assessment of the feature passed in the last run."}, []string{"feature"})
	duration := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_feature_duration_seconds", Help: "How long the feature ran."}, []string{"feature"})
	value := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_measurement", Help: "A measurement's quantiles (1 = max)."}, []string{"feature", "name", "unit", "quantile"})
	samples := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_measurement_samples", Help: "Samples behind a measurement."}, []string{"feature", "name", "unit"})
	overall := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpulab_conformance_passed", Help: "1 if the last run's verdict is PASSED."})
	when := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpulab_conformance_last_run_timestamp_seconds", Help: "End of the last run."})
	band := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpulab_conformance_baseline", Help: "The baseline runs' range of a measurement's quantile: bound low is the lowest value over the runs, high the highest."},
		[]string{"feature", "name", "unit", "quantile", "bound"})
	reg.MustRegister(verdict, featureStatus, requirement, passed, duration, value, samples, overall, when, band)
	run := r.RunVerdict()
	for _, v := range Verdicts {
		verdict.WithLabelValues(string(v)).Set(boolValue(v == run))
	}
	for _, f := range r.Features {
		status := FeatureStatus(f.Assessments)
		for _, s := range []Status{StatusPassed, StatusPartial, StatusFailed} {
			featureStatus.WithLabelValues(f.Name, string(s)).Set(boolValue(s == status))
		}
		passed.WithLabelValues(f.Name).Set(boolValue(status == StatusPassed))
		duration.WithLabelValues(f.Name).Set(f.Seconds)
	}
	for _, ev := range KAREvidence(r.Features, r.Requested...) {
		for _, s := range []Status{StatusPassed, StatusPartial, StatusFailed, StatusNotTested} {
			requirement.WithLabelValues(string(ev.Requirement), ev.KAR, string(s)).Set(boolValue(s == ev.Status))
		}
	}
	for _, m := range r.Measurements {
		for q, v := range map[string]float64{"0.5": m.P50, "0.9": m.P90, "0.99": m.P99, "1": m.Max} {
			value.WithLabelValues(m.Feature, m.Name, m.Unit, q).Set(v)
		}
		samples.WithLabelValues(m.Feature, m.Name, m.Unit).Set(float64(m.Samples))
	}
	for k, r := range BaselineBand(baseline) {
		band.WithLabelValues(k.Feature, k.Name, k.Unit, k.Quantile, "low").Set(r.Low)
		band.WithLabelValues(k.Feature, k.Name, k.Unit, k.Quantile, "high").Set(r.High)
	}
	overall.Set(boolValue(run == VerdictPassed))
	when.Set(float64(r.EndTime.Unix()))
	pusher := push.New(url, PushJob).Gatherer(reg).
		Grouping("profile", r.Environment.Profile).
		Grouping("cluster", PushCluster(r.Environment)).
		Grouping("workload", r.Environment.WorkloadName())
	if err := pusher.PushContext(ctx); err != nil {
		return fmt.Errorf("pushing results to %s: %w", url, err)
	}
	return nil
}

// BandKey names one quantile of one measurement in BaselineBand.
type BandKey struct{ Feature, Name, Unit, Quantile string }

// Band is the range a quantile spanned over baseline runs.
type Band struct{ Low, High float64 }

// BaselineBand is, for each measurement's quantile (0.5, 0.9, 0.99 and 1,
// the max), the lowest and highest value over the runs. A measurement with
// no samples in a run has no value there and does not widen the band.
func BaselineBand(runs []*Results) map[BandKey]Band {
	out := map[BandKey]Band{}
	for _, r := range runs {
		for _, m := range r.Measurements {
			if m.Samples == 0 {
				continue
			}
			for q, v := range map[string]float64{"0.5": m.P50, "0.9": m.P90, "0.99": m.P99, "1": m.Max} {
				k := BandKey{m.Feature, m.Name, m.Unit, q}
				b, seen := out[k]
				if !seen {
					b = Band{v, v}
				}
				out[k] = Band{min(b.Low, v), max(b.High, v)}
			}
		}
	}
	return out
}

// PushCluster is the cluster grouping label of a run: its ClusterName, or
// its profile where none was given (one cluster per profile, as before
// clusters were named).
func PushCluster(e Environment) string {
	if e.ClusterName != "" {
		return e.ClusterName
	}
	return e.Profile
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
