package dashboards

// Conformance is the nightly-trends dashboard over the series the
// conformance suite pushes to a Pushgateway (job gpulab_conformance, grouped
// by profile). The Pushgateway holds the last run; Prometheus's history of
// it is the trend, one step per run.
func Conformance() *Dashboard {
	const sel = `job="gpulab_conformance", profile=~"$profile"`
	d := newDashboard("gpulab-conformance", "gpulab / Conformance trends",
		"Verdicts and measurements of each conformance run (gpulab-conformance --pushgateway-url), over time.",
		labelValues("profile", "profile", `gpulab_conformance_passed{job="gpulab_conformance"}`, "Suite profile the run used (local, cluster)."),
		labelValues("feature", "feature", `gpulab_conformance_feature_passed{job="gpulab_conformance", profile=~"$profile"}`, "Suite features (controller, gang, latency)."),
	)
	passFail := valueText(0, "FAIL", "red", 1, "PASS", "green")
	return layout(d,
		row("Last run"),
		stat("Verdict", "Whether every feature of the last run passed.", "none", 6, thresholds("red", 1, "green"), passFail,
			query(`gpulab_conformance_passed{`+sel+`}`, "{{profile}}")),
		stat("Last run", "When the last run ended.", "dateTimeFromNow", 6, nil, nil,
			query(`gpulab_conformance_last_run_timestamp_seconds{`+sel+`} * 1000`, "{{profile}}")),
		stat("Features", "Each feature's verdict in the last run.", "none", 12, thresholds("red", 1, "green"), passFail,
			query(`gpulab_conformance_feature_passed{`+sel+`, feature=~"$feature"}`, "{{feature}}")),

		row("Trends"),
		stateTimeline("Verdict per feature", "PASS or FAIL of each feature, run after run.", 24, passFail,
			query(`gpulab_conformance_feature_passed{`+sel+`, feature=~"$feature"}`, "{{profile}} {{feature}}")),
		timeseries("Latency p50", "Median of each latency measurement (seconds) per run: create to PodGroup, pods created, all bound, pods Ready, status Ready; leader failover.", "s", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit="seconds", quantile="0.5"}`, "{{feature}} {{name}}")),
		timeseries("Latency p99", "99th percentile of each latency measurement per run. A step up that stays is a regression; compare runs with `gpulab-conformance compare`.", "s", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit="seconds", quantile="0.99"}`, "{{feature}} {{name}}")),
		timeseries("Latency max", "Worst sample of each latency measurement per run.", "s", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit="seconds", quantile="1"}`, "{{feature}} {{name}}")),
		timeseries("Counts per run", "Measurements that are counts (clusters, reconciles per cluster, API requests per cluster, errors).", "short", 12,
			query(`gpulab_conformance_measurement{`+sel+`, feature=~"$feature", unit!="seconds", quantile="1"}`, "{{feature}} {{name}} ({{unit}})")),
		timeseries("Feature duration", "How long each feature ran.", "s", 12,
			query(`gpulab_conformance_feature_duration_seconds{`+sel+`, feature=~"$feature"}`, "{{profile}} {{feature}}")),
		timeseries("Samples", "Samples behind each measurement (clusters or gangs measured).", "short", 12,
			query(`gpulab_conformance_measurement_samples{`+sel+`, feature=~"$feature"}`, "{{feature}} {{name}}")),
	)
}
