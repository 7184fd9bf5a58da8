package dashboards

// Gangs is the gang-scheduling dashboard: the nodes and the gangs waiting
// for them, where GPUClusters are in their lifecycle, how long gangs take
// to bind and become Ready, why the operator refuses some, and what
// Volcano sees.
func Gangs() *Dashboard {
	const c = `{` + clusterMatcher + `}`
	const q = `{` + clusterMatcher + `, queue_name=~"$queue"}`
	d := newDashboard("gpulab-gangs", "gpulab / Gangs",
		"Nodes and pending gangs, GPUClusters by phase, time to bound and Ready, unschedulable decisions, and Volcano's scheduling latency and unschedulable gangs.",
		clusterVariable(`{__name__=~"gpulab_clusters|volcano_queue_pod_group_running_count"}`),
		labelValues("queue", "queue_name", `volcano_queue_pod_group_running_count`+c, "Volcano queues."),
	)
	// gpulab_clusters, gpulab_jobs and gpulab_nodes come from the leader;
	// max over a cluster's replicas ignores a replica that has not
	// reconciled yet (it reports nothing) and never double-counts during a
	// hand-over. The sum over clusters comes after.
	phases := func(metric, phase string) string {
		return `max by (cluster, phase) (` + metric + `{` + clusterMatcher + phase + `})`
	}
	nodes := func(class string) string {
		return `sum(max by (cluster, gpu, autoscaled) (gpulab_nodes{` + clusterMatcher + class + `}))`
	}
	return d.row("Nodes and pending gangs").add(
		timeseriesPanel("Nodes", "Every node, those with GPUs (allocatable nvidia.com/gpu or a GFD product label), and those an autoscaler added (Karpenter's karpenter.sh/nodepool label; other autoscalers' nodes are not told apart), as the operator's leader sees them. Read beside Pending gangs: nodes arriving while gangs wait is the autoscaler at work.", "short", 12,
			query(nodes(""), "nodes"),
			query(nodes(`, gpu="true"`), "GPU nodes"),
			query(nodes(`, autoscaled="true"`), "added by an autoscaler")),
		stacked("Pending gangs", "GPUClusters whose gang waits, by phase: Pending (accepted, pods not yet created), WaitingForNodes (larger than today's nodes: its pods wait for the autoscaler), Unschedulable (can never fit). The top of the stack is every pending gang.",
			query(`sum by (phase) (`+phases("gpulab_clusters", `, phase=~"Pending|WaitingForNodes|Unschedulable"`)+`)`, "{{phase}}")),
	).row("GPUClusters").add(
		stacked("GPUClusters by phase", "GPUClusters in each phase (Pending, Unschedulable, WaitingForNodes, Scheduling, Provisioning, Ready, Suspended, Failed), as the operator's leader last saw them.",
			query(`sum by (phase) (`+phases("gpulab_clusters", "")+`)`, "{{phase}}")),
		timeseriesPanel("Waiting GPUClusters", "GPUClusters not yet bound (Pending, Scheduling) or bound but not Ready (Provisioning), and those that can never fit (Unschedulable).", "short", 12,
			query(`sum(`+phases("gpulab_clusters", `, phase=~"Pending|Scheduling"`)+`)`, "waiting to bind"),
			query(`sum(`+phases("gpulab_clusters", `, phase="Provisioning"`)+`)`, "bound, not Ready"),
			query(`sum(`+phases("gpulab_clusters", `, phase="Unschedulable"`)+`)`, "unschedulable")),
		heatmapPanel("Time to bound", "Time from GPUCluster creation until every desired pod was first bound, per completed gang.", "s", 12,
			`sum by (le) (increase(gpulab_cluster_time_to_bound_seconds_bucket`+c+`[$__rate_interval]))`),
		heatmapPanel("Time to Ready", "Time from GPUCluster creation until every desired pod was first Ready.", "s", 12,
			`sum by (le) (increase(gpulab_cluster_time_to_ready_seconds_bucket`+c+`[$__rate_interval]))`),
		timeseriesPanel("Time to bound and Ready (p50, p99)", "Percentiles over the last 30 minutes of gangs that finished binding or became Ready.", "s", 12,
			query(`histogram_quantile(0.5, sum by (le) (rate(gpulab_cluster_time_to_bound_seconds_bucket`+c+`[30m])))`, "bound p50"),
			query(`histogram_quantile(0.99, sum by (le) (rate(gpulab_cluster_time_to_bound_seconds_bucket`+c+`[30m])))`, "bound p99"),
			query(`histogram_quantile(0.5, sum by (le) (rate(gpulab_cluster_time_to_ready_seconds_bucket`+c+`[30m])))`, "Ready p50"),
			query(`histogram_quantile(0.99, sum by (le) (rate(gpulab_cluster_time_to_ready_seconds_bucket`+c+`[30m])))`, "Ready p99")),
		timeseriesPanel("Unschedulable decisions by reason", "Times the operator found a GPUCluster that can never fit the healthy GPU capacity (InsufficientGPUs, NoMatchingNodes) since the leader started; a step up is a new refusal. No pod is created for such a cluster.", "short", 12,
			query(`sum by (reason) (gpulab_unschedulable_decisions_total`+c+`)`, "{{reason}}")),
	).row("GPUJobs").add(
		stacked("GPUJobs by phase", "GPUJobs in each phase (Pending, Provisioning, Running, Succeeded, Failed, Suspended), as the operator's leader last saw them.",
			query(`sum by (phase) (`+phases("gpulab_jobs", "")+`)`, "{{phase}}")),
		timeseriesPanel("GPUJob duration (p50, p99)", "Start to verdict of the GPUJobs that finished in the last 30 minutes, by result.", "s", 12,
			query(`histogram_quantile(0.5, sum by (result, le) (rate(gpulab_job_duration_seconds_bucket`+c+`[30m])))`, "{{result}} p50"),
			query(`histogram_quantile(0.99, sum by (result, le) (rate(gpulab_job_duration_seconds_bucket`+c+`[30m])))`, "{{result}} p99")),
	).row("Volcano").add(
		stacked("PodGroups by state", "PodGroups per Volcano state in the selected queues: Pending (not admitted), Inqueue (admitted, waiting for room), Running, Unknown (partly running).",
			query(`sum(volcano_queue_pod_group_pending_count`+q+`)`, "Pending"),
			query(`sum(volcano_queue_pod_group_inqueue_count`+q+`)`, "Inqueue"),
			query(`sum(volcano_queue_pod_group_running_count`+q+`)`, "Running"),
			query(`sum(volcano_queue_pod_group_unknown_count`+q+`)`, "Unknown")),
		timeseriesPanel("Unschedulable gangs", "Gangs Volcano could not place in its last session, and their pods short of minMember. A gang that stays here is waiting for capacity (or can never fit).", "short", 12,
			query(`sum(max by (cluster) (volcano_unschedule_job_count`+c+`))`, "gangs"),
			query(`sum(volcano_unschedule_task_count`+c+`)`, "pods short")),
		timeseriesPanel("Scheduling session latency", "p50 and p99 of one Volcano scheduling session (algorithm + binding). Sessions run every schedule period (1 s on the local testbed).", "ms", 8,
			query(`histogram_quantile(0.5, sum by (le) (rate(volcano_e2e_scheduling_latency_milliseconds_bucket`+c+`[$__rate_interval])))`, "p50"),
			query(`histogram_quantile(0.99, sum by (le) (rate(volcano_e2e_scheduling_latency_milliseconds_bucket`+c+`[$__rate_interval])))`, "p99")),
		timeseriesPanel("Gang scheduling latency", "p50 and p99 time from a gang's creation until Volcano scheduled it, over the last 30 minutes.", "ms", 8,
			query(`histogram_quantile(0.5, sum by (le) (rate(volcano_e2e_job_scheduling_latency_milliseconds_bucket`+c+`[30m])))`, "p50"),
			query(`histogram_quantile(0.99, sum by (le) (rate(volcano_e2e_job_scheduling_latency_milliseconds_bucket`+c+`[30m])))`, "p99")),
		timeseriesPanel("Pod scheduling latency", "p50 and p99 time from a pod's creation until Volcano bound it.", "ms", 8,
			query(`histogram_quantile(0.5, sum by (le) (rate(volcano_task_scheduling_latency_milliseconds_bucket`+c+`[$__rate_interval])))`, "p50"),
			query(`histogram_quantile(0.99, sum by (le) (rate(volcano_task_scheduling_latency_milliseconds_bucket`+c+`[$__rate_interval])))`, "p99")),
		tablePanel("Gangs short of pods", "Each gang Volcano could not place in its last session, with its pods short of minMember (0 once placed).", "short", 12,
			instant(`sort_desc(max by (cluster, job_id) (volcano_unschedule_task_count`+c+`))`, "{{job_id}}")),
		timeseriesPanel("Action latency", "p99 time of each Volcano action (enqueue, allocate, backfill) per session.", "ms", 12,
			query(`histogram_quantile(0.99, sum by (action, le) (rate(volcano_action_scheduling_latency_milliseconds_bucket`+c+`[$__rate_interval])))`, "{{action}}")),
	)
}
