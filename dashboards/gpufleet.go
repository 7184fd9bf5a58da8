package dashboards

import "strings"

// Sources the GPU-fleet dashboard reads, chosen by its source variable:
// the value is the metric-name prefix of the exporter's series.
var (
	SourceGPULab = choice{Text: "gpulab-agent", Value: "gpulab_"}
	SourceDCGM   = choice{Text: "DCGM exporter", Value: "DCGM_"}
)

// sourceGuard is in every GPU-fleet selector: a series counts only if its
// name starts with the selected source's prefix. Each query is written for
// both exporters, joined by `or`; the guard leaves exactly one side with
// series, so the same panel shows gpulab_gpu_* or DCGM_FI_DEV_* and never
// both (gpulab's agent may serve both families at once).
const sourceGuard = `__name__=~"${source}.+"`

// gpuInfoNames are the series that exist once per GPU for each source.
const gpuInfoNames = `__name__=~"gpulab_gpu_info|DCGM_FI_DEV_GPU_TEMP"`

// gpulab is a selector for one of gpulab-agent's per-GPU series.
func gpulab(metric string) string {
	return `{__name__="` + metric + `", ` + sourceGuard + `, ` + clusterMatcher + `, instance=~"$instance", hostname=~"$hostname", gpu=~"$gpu"}`
}

// dcgm is a selector for one of DCGM exporter's series; its node label is
// Hostname.
func dcgm(metric string) string {
	return `{__name__="` + metric + `", ` + sourceGuard + `, ` + clusterMatcher + `, instance=~"$instance", Hostname=~"$hostname", gpu=~"$gpu"}`
}

// either joins a query's gpulab-agent and DCGM exporter forms.
func either(gpulabExpr, dcgmExpr string) string {
	return "(" + gpulabExpr + ") or (" + dcgmExpr + ")"
}

// dcgmHost copies DCGM's Hostname into hostname, so legends and tables
// read the same for both sources.
func dcgmHost(expr string) string {
	return `label_replace(` + expr + `, "hostname", "$1", "Hostname", "(.*)")`
}

// applicationXIDs are XIDs caused by the application, not the GPU; they
// leave a GPU healthy (as gpulab-agent judges them).
var applicationXIDs = []string{"13", "31", "43", "45", "68", "109"}

// dcgmSick are the GPUs DCGM exporter shows as unusable: a last XID that is
// not an application's, or a failed row remap. It approximates gpulab's
// health, which also sees lost GPUs and NVLink fabric errors.
func dcgmSick() string {
	return `(` + dcgm("DCGM_FI_DEV_XID_ERRORS") + ` > 0 != ` + strings.Join(applicationXIDs, " != ") + `) or (` +
		dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE") + ` > 0)`
}

// GPUFleet is the per-GPU dashboard over gpulab-agent's or DCGM exporter's
// series (variable source), laid out and labelled like the DCGM exporter's
// dashboard (variables instance and gpu; values per GPU with legend
// "hostname GPU n").
func GPUFleet() *Dashboard {
	const legend = "{{hostname}} GPU {{gpu}}"
	const info = gpuInfoNames + `, ` + sourceGuard + `, ` + clusterMatcher
	dcgmGPUs := dcgm("DCGM_FI_DEV_GPU_TEMP")
	d := newDashboard("gpulab-gpu-fleet", "gpulab / GPU fleet",
		"Per-GPU health, utilization, memory, temperature, power and errors from gpulab-agent or DCGM exporter (labels gpu, UUID, modelName, hostname or Hostname).",
		customVariable("source", "source", "Which exporter's series to read: gpulab-agent (gpulab_gpu_*) or DCGM exporter (DCGM_FI_DEV_*).", SourceGPULab, SourceDCGM),
		clusterVariable(`{`+gpuInfoNames+`, `+sourceGuard+`}`),
		labelValues("instance", "instance", `{`+info+`}`, "Exporter scrape targets (one per GPU node; one for every node on the local testbed)."),
		queryResult("hostname", "hostname", `count by (hostname, Hostname) ({`+info+`, instance=~"$instance"})`, `/[hH]ostname="([^"]+)"/`,
			"GPU nodes (gpulab-agent's hostname, DCGM exporter's Hostname)."),
		queryResult("gpu", "gpu",
			either(`count by (gpu) ({`+info+`, instance=~"$instance", hostname=~"$hostname"})`, `count by (gpu) ({`+info+`, instance=~"$instance", Hostname=~"$hostname"})`),
			`/gpu="([^"]+)"/`, "GPU index on the node."),
	)
	// A DCGM GPU counts healthy when it is not sick.
	dcgmHealthy := func(by string) string {
		return `count by (` + by + `) (` + dcgmHost(dcgmGPUs) + ` unless on (UUID) (` + dcgmSick() + `))`
	}
	return d.row("Fleet").add(
		statPanel("GPUs", "GPUs reported by the exporters.", "short", 4, nil, nil,
			query(either(`count(`+gpulab("gpulab_gpu_info")+`)`, `count(`+dcgmGPUs+`)`), "GPUs")),
		statPanel("Unhealthy GPUs", "GPUs gangs cannot use. gpulab-agent: Unhealthy or Unknown (XID, double-bit ECC, row remap failure, lost, NVLink fabric); the operator sizes gangs from healthy GPUs only. DCGM exporter: a last XID that is not an application's, or a row remap failure.", "short", 4,
			thresholds("green", 1, "red"), nil,
			query(either(`sum(1 - `+gpulab("gpulab_gpu_healthy")+`)`, `count(`+dcgmSick()+`) or 0 * count(`+dcgmGPUs+`)`), "unhealthy")),
		statPanel("Fleet power", "Board power of the selected GPUs.", "watt", 4, nil, nil,
			query(either(`sum(`+gpulab("gpulab_gpu_power_usage_watts")+`)`, `sum(`+dcgm("DCGM_FI_DEV_POWER_USAGE")+`)`), "power")),
		statPanel("Mean utilization", "Mean GPU utilization of the selected GPUs.", "percentunit", 4,
			thresholds("blue", 0.3, "green"), nil,
			query(either(`avg(`+gpulab("gpulab_gpu_utilization_ratio")+`)`, `avg(`+dcgm("DCGM_FI_DEV_GPU_UTIL")+`) / 100`), "utilization")),
		merged(tablePanel("GPUs by product and node", "Healthy and total GPUs per node and product (modelName), with the driver version.", "short", 8,
			instant(either(`sum by (hostname, modelName, driver_version) (`+gpulab("gpulab_gpu_info")+`)`,
				`count by (hostname, modelName, driver_version) (label_replace(`+dcgmHost(dcgmGPUs)+`, "driver_version", "$1", "DCGM_FI_DRIVER_VERSION", "(.*)"))`), "total"),
			instant(either(`sum by (hostname, modelName) (`+gpulab("gpulab_gpu_healthy")+`)`, dcgmHealthy("hostname, modelName")), "healthy"))),
		timeseriesPanel("Unhealthy GPUs per node", "GPUs not Healthy on each node.", "short", 12,
			query(either(`sum by (hostname) (1 - `+gpulab("gpulab_gpu_healthy")+`)`,
				`count by (hostname) (`+dcgmHost(dcgmSick())+`) or 0 * count by (hostname) (`+dcgmHost(dcgmGPUs)+`)`), "{{hostname}}")),
		timeseriesPanel("GPUs by product", "GPUs per product, healthy and total.", "short", 12,
			query(either(`count by (modelName) (`+gpulab("gpulab_gpu_info")+`)`, `count by (modelName) (`+dcgmGPUs+`)`), "{{modelName}} total"),
			query(either(`sum by (modelName) (`+gpulab("gpulab_gpu_healthy")+`)`, dcgmHealthy("modelName")), "{{modelName}} healthy")),
	).row("Per GPU").add(
		timeseriesPanel("GPU utilization", "Fraction of the sample period a kernel ran (DCGM_FI_DEV_GPU_UTIL / 100). Absent in MIG mode.", "percentunit", 12,
			query(either(gpulab("gpulab_gpu_utilization_ratio"), dcgmHost(dcgm("DCGM_FI_DEV_GPU_UTIL"))+` / 100`), legend)),
		timeseriesPanel("Memory copy utilization", "Fraction of the sample period memory was read or written (DCGM_FI_DEV_MEM_COPY_UTIL / 100).", "percentunit", 12,
			query(either(gpulab("gpulab_gpu_memory_utilization_ratio"), dcgmHost(dcgm("DCGM_FI_DEV_MEM_COPY_UTIL"))+` / 100`), legend)),
		timeseriesPanel("Framebuffer memory used", "Framebuffer memory in use, in bytes (DCGM_FI_DEV_FB_USED is MiB).", "bytes", 12,
			query(either(gpulab("gpulab_gpu_memory_used_bytes"), dcgmHost(dcgm("DCGM_FI_DEV_FB_USED"))+` * 1048576`), legend)),
		timeseriesPanel("Framebuffer memory used (fraction)", "Used over total framebuffer memory (DCGM exporter: used over used + free, the driver's reserve left out).", "percentunit", 12,
			query(either(gpulab("gpulab_gpu_memory_used_bytes")+` / `+gpulab("gpulab_gpu_memory_total_bytes"),
				dcgmHost(dcgm("DCGM_FI_DEV_FB_USED")+` / (`+dcgm("DCGM_FI_DEV_FB_USED")+` + `+dcgm("DCGM_FI_DEV_FB_FREE")+`)`)), legend)),
		timeseriesPanel("GPU temperature", "Core temperature (DCGM_FI_DEV_GPU_TEMP).", "celsius", 12,
			query(either(gpulab("gpulab_gpu_temperature_celsius"), dcgmHost(dcgm("DCGM_FI_DEV_GPU_TEMP"))), legend)),
		timeseriesPanel("Power draw", "Board power (DCGM_FI_DEV_POWER_USAGE).", "watt", 12,
			query(either(gpulab("gpulab_gpu_power_usage_watts"), dcgmHost(dcgm("DCGM_FI_DEV_POWER_USAGE"))), legend)),
	).row("Errors").add(
		tablePanel("Last XID per GPU", "The last XID each GPU reported (DCGM_FI_DEV_XID_ERRORS); 0 means none since the exporter started. Application XIDs (13, 31, 43, 45, 68, 109) leave a GPU healthy.", "none", 12,
			instant(`sort_desc(`+either(`max by (hostname, gpu, UUID, modelName) (`+gpulab("gpulab_gpu_last_xid")+`)`,
				`max by (hostname, gpu, UUID, modelName) (`+dcgmHost(dcgm("DCGM_FI_DEV_XID_ERRORS"))+`)`)+`)`, legend)),
		timeseriesPanel("Uncorrected ECC errors", "Uncorrected (double-bit) ECC errors per hour (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL).", "short", 12,
			query(either(`increase(`+gpulab("gpulab_gpu_ecc_uncorrected_errors_total")+`[1h])`,
				dcgmHost(`increase(`+dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")+`[1h])`)), legend)),
		timeseriesPanel("Remapped rows", "Rows remapped for uncorrectable and correctable errors (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, _CORRECTABLE_).", "short", 12,
			query(either(gpulab("gpulab_gpu_uncorrectable_remapped_rows"), dcgmHost(dcgm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"))), legend+" uncorrectable"),
			query(either(gpulab("gpulab_gpu_correctable_remapped_rows"), dcgmHost(dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"))), legend+" correctable")),
		timeseriesPanel("Exporters up", "1 while an exporter answers scrapes. gpulab-agent's own health (scans, API writes, NVML errors) is on the gpulab / Node agents dashboard.", "short", 12,
			query(`up{`+clusterMatcher+`, instance=~"$instance"}`, "{{instance}} up")),
	)
}
