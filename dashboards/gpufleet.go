package dashboards

// GPUFleet is the per-GPU dashboard over the node agent's metrics, laid out
// and labelled like the DCGM exporter's dashboard (variables instance and
// gpu; values per GPU with legend "hostname GPU n").
func GPUFleet() *Dashboard {
	const sel = `instance=~"$instance", hostname=~"$hostname", gpu=~"$gpu"`
	const legend = "{{hostname}} GPU {{gpu}}"
	d := newDashboard("gpulab-gpu-fleet", "gpulab / GPU fleet",
		"Per-GPU health, utilization, memory, temperature, power and errors from gpulab-agent (DCGM exporter labels: gpu, UUID, modelName, hostname).",
		labelValues("instance", "instance", `gpulab_gpu_info`, "gpulab-agent scrape targets (one per GPU node; one for every node on the local testbed)."),
		labelValues("hostname", "hostname", `gpulab_gpu_info{instance=~"$instance"}`, "GPU nodes."),
		labelValues("gpu", "gpu", `gpulab_gpu_info{instance=~"$instance", hostname=~"$hostname"}`, "GPU index on the node."),
	)
	return layout(d,
		row("Fleet"),
		stat("GPUs", "GPUs reported by the agents.", "short", 4, nil, nil,
			query(`count(gpulab_gpu_info{`+sel+`})`, "GPUs")),
		stat("Unhealthy GPUs", "GPUs the agent marks Unhealthy or Unknown (XID, double-bit ECC, row remap failure, lost, NVLink fabric). The operator sizes gangs from healthy GPUs only.", "short", 4,
			thresholds("green", 1, "red"), nil,
			query(`sum(1 - gpulab_gpu_healthy{`+sel+`})`, "unhealthy")),
		stat("Fleet power", "Board power of the selected GPUs.", "watt", 4, nil, nil,
			query(`sum(gpulab_gpu_power_usage_watts{`+sel+`})`, "power")),
		stat("Mean utilization", "Mean GPU utilization of the selected GPUs.", "percentunit", 4,
			thresholds("blue", 0.3, "green"), nil,
			query(`avg(gpulab_gpu_utilization_ratio{`+sel+`})`, "utilization")),
		table("GPUs by product and node", "Healthy and total GPUs per node and product (modelName), with the driver version.", "short", 8,
			instant(`sum by (hostname, modelName, driver_version) (gpulab_gpu_info{`+sel+`})`, "total"),
			instant(`sum by (hostname, modelName) (gpulab_gpu_healthy{`+sel+`})`, "healthy")).merged(),
		timeseries("Unhealthy GPUs per node", "GPUs not Healthy on each node.", "short", 12,
			query(`sum by (hostname) (1 - gpulab_gpu_healthy{`+sel+`})`, "{{hostname}}")),
		timeseries("GPUs by product", "GPUs per product, healthy and total.", "short", 12,
			query(`count by (modelName) (gpulab_gpu_info{`+sel+`})`, "{{modelName}} total"),
			query(`sum by (modelName) (gpulab_gpu_healthy{`+sel+`})`, "{{modelName}} healthy")),

		row("Per GPU"),
		timeseries("GPU utilization", "Fraction of the sample period a kernel ran (DCGM_FI_DEV_GPU_UTIL / 100). Absent in MIG mode.", "percentunit", 12,
			query(`gpulab_gpu_utilization_ratio{`+sel+`}`, legend)),
		timeseries("Memory copy utilization", "Fraction of the sample period memory was read or written (DCGM_FI_DEV_MEM_COPY_UTIL / 100).", "percentunit", 12,
			query(`gpulab_gpu_memory_utilization_ratio{`+sel+`}`, legend)),
		timeseries("Framebuffer memory used", "Framebuffer memory in use (DCGM_FI_DEV_FB_USED, in bytes).", "bytes", 12,
			query(`gpulab_gpu_memory_used_bytes{`+sel+`}`, legend)),
		timeseries("Framebuffer memory used (fraction)", "Used over total framebuffer memory.", "percentunit", 12,
			query(`gpulab_gpu_memory_used_bytes{`+sel+`} / gpulab_gpu_memory_total_bytes{`+sel+`}`, legend)),
		timeseries("GPU temperature", "Core temperature (DCGM_FI_DEV_GPU_TEMP).", "celsius", 12,
			query(`gpulab_gpu_temperature_celsius{`+sel+`}`, legend)),
		timeseries("Power draw", "Board power (DCGM_FI_DEV_POWER_USAGE).", "watt", 12,
			query(`gpulab_gpu_power_usage_watts{`+sel+`}`, legend)),

		row("Errors"),
		table("Last XID per GPU", "The last XID each GPU reported (DCGM_FI_DEV_XID_ERRORS); 0 means none since the agent started. Application XIDs (13, 31, 43, 45, 68, 109) leave a GPU healthy.", "none", 12,
			instant(`sort_desc(max by (hostname, gpu, UUID, modelName) (gpulab_gpu_last_xid{`+sel+`}))`, legend)),
		timeseries("Health events", "NVML health events the agents received since they started, by kind; ignored=true for application XIDs. A step up is a new event.", "short", 12,
			query(`sum by (kind, ignored) (gpulab_agent_health_events_total{instance=~"$instance"})`, "{{kind}} ignored={{ignored}}")),
		timeseries("Uncorrected ECC errors", "Uncorrected (double-bit) ECC errors per hour (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL).", "short", 8,
			query(`increase(gpulab_gpu_ecc_uncorrected_errors_total{`+sel+`}[1h])`, legend)),
		timeseries("Remapped rows", "Rows remapped for uncorrectable and correctable errors (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, _CORRECTABLE_).", "short", 8,
			query(`gpulab_gpu_uncorrectable_remapped_rows{`+sel+`}`, legend+" uncorrectable"),
			query(`gpulab_gpu_correctable_remapped_rows{`+sel+`}`, legend+" correctable")),
		timeseries("NVML query errors", "NVML queries that failed in each GPU's last scan; a GPU that cannot be queried is reported Unknown.", "short", 8,
			query(`gpulab_gpu_query_errors{`+sel+`}`, legend)),

		row("Agents"),
		timeseries("Agent scan duration", "p99 time to read every GPU of a node over NVML.", "s", 8,
			query(`histogram_quantile(0.99, sum by (instance, le) (rate(gpulab_agent_scan_duration_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`, "{{instance}}")),
		timeseries("Agent API writes", "Server-side applies per second by object (inventory, labels, capacity) and failures. Writes happen only when something changed.", "ops", 8,
			query(`sum by (object) (rate(gpulab_agent_writes_total{instance=~"$instance"}[$__rate_interval]))`, "{{object}}"),
			query(`sum by (object) (rate(gpulab_agent_write_errors_total{instance=~"$instance"}[$__rate_interval])) or vector(0)`, "failed {{object}}")),
		timeseries("Agents up", "1 while an agent answers scrapes; its failed NVML scans per second.", "short", 8,
			query(`up{instance=~"$instance"}`, "{{instance}} up"),
			query(`sum by (instance) (rate(gpulab_agent_scan_errors_total{instance=~"$instance"}[$__rate_interval]))`, "{{instance}} scan errors/s")),
	)
}
