package dashboards

// Agents is the dashboard of gpulab-agent itself: is it up and scanning,
// does it publish to the API server, what health events and NVML errors it
// saw. DCGM exporter has none of these, so they are not on the GPU-fleet
// dashboard, which works on either exporter.
func Agents() *Dashboard {
	const inst = clusterMatcher + `, instance=~"$instance"`
	const legend = "{{hostname}} GPU {{gpu}}"
	d := newDashboard("gpulab-agents", "gpulab / Node agents",
		"gpulab-agent's scans, API writes, health events and NVML errors.",
		clusterVariable(`gpulab_agent_scan_duration_seconds_count`),
		labelValues("instance", "instance", `gpulab_agent_scan_duration_seconds_count{`+clusterMatcher+`}`, "gpulab-agent scrape targets (one per GPU node; one for every node on the local testbed)."),
		labelValues("hostname", "hostname", `gpulab_gpu_info{`+inst+`}`, "GPU nodes."),
	)
	return d.row("Agents").add(
		timeseriesPanel("Agents up", "1 while an agent answers scrapes; its failed NVML scans per second.", "short", 8,
			query(`up{`+inst+`}`, "{{instance}} up"),
			query(`sum by (instance) (rate(gpulab_agent_scan_errors_total{`+inst+`}[$__rate_interval]))`, "{{instance}} scan errors/s")),
		timeseriesPanel("Agent scan duration", "p99 time to read every GPU of a node over NVML.", "s", 8,
			query(`histogram_quantile(0.99, sum by (instance, le) (rate(gpulab_agent_scan_duration_seconds_bucket{`+inst+`}[$__rate_interval])))`, "{{instance}}")),
		timeseriesPanel("Agent API writes", "Server-side applies per second by object (inventory, labels, capacity) and failures. Writes happen only when something changed.", "ops", 8,
			query(`sum by (object) (rate(gpulab_agent_writes_total{`+inst+`}[$__rate_interval]))`, "{{object}}"),
			query(`sum by (object) (rate(gpulab_agent_write_errors_total{`+inst+`}[$__rate_interval])) or vector(0)`, "failed {{object}}")),
		timeseriesPanel("Health events", "NVML health events the agents received since they started, by kind; ignored=true for application XIDs. A step up is a new event.", "short", 12,
			query(`sum by (kind, ignored) (gpulab_agent_health_events_total{`+inst+`})`, "{{kind}} ignored={{ignored}}")),
		timeseriesPanel("NVML query errors", "NVML queries that failed in each GPU's last scan; a GPU that cannot be queried is reported Unknown.", "short", 12,
			query(`gpulab_gpu_query_errors{`+inst+`, hostname=~"$hostname"}`, legend)),
	)
}
