package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Conformance is the nightly-trends dashboard over the series the
// conformance suite pushes to a Pushgateway (job gpulab_conformance, grouped
// by profile, cluster and workload). The Pushgateway holds the last run; Prometheus's
// history of it is the trend, one step per run.
func Conformance() *Dashboard {
	const sel = `job="gpulab_conformance", ` + clusterMatcher + `, profile=~"$profile", workload=~"$workload"`
	d := newDashboard("gpulab-conformance", "gpulab / Conformance trends",
		"Verdicts and measurements of each conformance run (gpulab-conformance --pushgateway-url), over time.",
		clusterVariable(`gpulab_conformance_passed{job="gpulab_conformance"}`),
		labelValues("profile", "profile", `gpulab_conformance_passed{job="gpulab_conformance", `+clusterMatcher+`}`, "Suite profile the run used (local, cluster)."),
		labelValues("workload", "workload", `gpulab_conformance_passed{job="gpulab_conformance", `+clusterMatcher+`, profile=~"$profile"}`,
			"Kind of gang the run measured (gpucluster, raycluster, vcjob)."),
		labelValues("feature", "feature", `gpulab_conformance_feature_passed{`+sel+`}`, "Suite features (controller, gang, latency)."),
		labelValues("measurement", "name", `gpulab_conformance_baseline{`+sel+`, feature=~"$feature", unit="seconds"}`,
			"Latency measurements that have a baseline band (pushed with --push-baseline)."),
	)
	passFail := valueText(choiceColor{"0", "FAIL", "red"}, choiceColor{"1", "PASS", "green"})
	return d.row("Last run").add(
		statPanel("Verdict", "Whether every feature of the last run passed.", "none", 6, thresholds("red", 1, "green"), passFail,
			query(`gpulab_conformance_passed{`+sel+`}`, "{{cluster}} {{profile}} {{workload}}")),
		statPanel("Last run", "When the last run ended.", "dateTimeFromNow", 6, nil, nil,
			query(`gpulab_conformance_last_run_timestamp_seconds{`+sel+`} * 1000`, "{{cluster}} {{profile}} {{workload}}")),
		statPanel("Features", "Each feature's verdict in the last run.", "none", 12, thresholds("red", 1, "green"), passFail,
			query(`gpulab_conformance_feature_passed{`+sel+`, feature=~"$feature"}`, "{{feature}}")),
	).row("Trends").add(
		stateTimelinePanel("Verdict per feature", "PASS or FAIL of each feature, run after run.", 24, passFail,
			query(`gpulab_conformance_feature_passed{`+sel+`, feature=~"$feature"}`, "{{cluster}} {{profile}} {{workload}} {{feature}}")),
		timeseriesPanel("Latency p50", "Median of each latency measurement (seconds) per run: create to PodGroup, pods created, all bound, pods Ready, status Ready; leader failover.", "s", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit="seconds", quantile="0.5"}`, "{{workload}} {{feature}} {{name}}")),
		timeseriesPanel("Latency p99", "99th percentile of each latency measurement per run. A step up that stays is a regression; compare runs with `gpulab-conformance compare`.", "s", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit="seconds", quantile="0.99"}`, "{{workload}} {{feature}} {{name}}")),
		timeseriesPanel("Latency max", "Worst sample of each latency measurement per run.", "s", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit="seconds", quantile="1"}`, "{{workload}} {{feature}} {{name}}")),
		timeseriesPanel("Counts per run", "Measurements that are counts (clusters, reconciles per cluster, API requests per cluster, errors).", "short", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit!="seconds", quantile="1"}`, "{{feature}} {{name}} ({{unit}})")),
		timeseriesPanel("Feature duration", "How long each feature ran.", "s", 12,
			query(`gpulab_conformance_feature_duration_seconds{`+sel+`, feature=~"$feature"}`, "{{profile}} {{feature}}")),
		timeseriesPanel("Samples", "Samples behind each measurement (clusters or gangs measured).", "short", 12,
			query(`gpulab_conformance_measurement_samples{`+sel+`, feature=~"$feature"}`, "{{workload}} {{feature}} {{name}}")),
	).row("Against the baseline").add(
		againstBaseline(sel, "0.5", "p50"),
		againstBaseline(sel, "0.99", "p99"),
	)
}

// againstBaseline is one panel a measurement ($measurement repeats it):
// the runs' quantile as a line inside the band the baseline runs spanned
// (pushed with --push-baseline). Read it for one cluster and workload: the
// band's series are named by their bound alone.
func againstBaseline(sel, quantile, label string) *timeseries.PanelBuilder {
	series := func(metric, extra string) string {
		return metric + `{` + sel + `, feature=~"$feature", name=~"$measurement", unit="seconds", quantile="` + quantile + `"` + extra + `}`
	}
	return timeseriesPanel("$measurement "+label+" against the baseline",
		"The "+label+" of each run (line) inside the lowest-to-highest range of the baseline runs (band). A run outside the band is worth a "+
			"`gpulab-conformance compare`, which decides with a bootstrap interval and a minimum effect.", "s", 12,
		query(series("gpulab_conformance_measurement", ""), "{{workload}} {{feature}} {{name}}"),
		query(series("gpulab_conformance_baseline", `, bound="low"`), "baseline low"),
		query(series("gpulab_conformance_baseline", `, bound="high"`), "baseline high"),
	).Repeat("measurement").RepeatDirection(dashboard.PanelRepeatDirectionV).
		OverrideByName("baseline low", []dashboard.DynamicConfigValue{{Id: "custom.lineWidth", Value: 0}, {Id: "custom.fillOpacity", Value: 0}}).
		OverrideByName("baseline high", []dashboard.DynamicConfigValue{{Id: "custom.lineWidth", Value: 0}, {Id: "custom.fillBelowTo", Value: "baseline low"},
			{Id: "custom.fillOpacity", Value: 20}})
}
