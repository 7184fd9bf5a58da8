package dashboards

// Operator is the operator dashboard: is it reconciling, how fast, is it
// erring, is the queue keeping up, which replica leads.
func Operator() *Dashboard {
	const sel = clusterMatcher + `, controller=~"$controller", instance=~"$instance"`
	const inst = clusterMatcher + `, instance=~"$instance"`
	const leader = `leader_election_master_status{name="gpulab-operator.gpulab.io", ` + inst + `}`
	d := newDashboard("gpulab-operator", "gpulab / Operator",
		"The gpulab operator's controllers: reconcile rate, errors and latency, work queue, workers, API traffic and leader election.",
		clusterVariable(`controller_runtime_reconcile_total{controller=~"gpucluster|gpujob"}`),
		labelValues("instance", "instance", `controller_runtime_reconcile_total{controller=~"gpucluster|gpujob", `+clusterMatcher+`}`, "Operator replicas (scrape targets)."),
		labelValues("controller", "controller", `controller_runtime_reconcile_total{controller=~"gpucluster|gpujob", `+inst+`}`, "gpulab controllers."),
	)
	return d.row("Overview").add(
		statPanel("Leader", "Replicas holding the gpulab-operator.gpulab.io lease, per cluster. Exactly one should; 0 means no replica is reconciling.", "short", 6,
			thresholds("red", 1, "green", 2, "red"), nil,
			query(`sum by (cluster) (`+leader+`)`, "{{cluster}}")),
		statPanel("Reconciles/s", "Reconciles per second, every controller selected.", "ops", 6, nil, nil,
			query(`sum(rate(controller_runtime_reconcile_total{`+sel+`}[$__rate_interval]))`, "reconciles/s")),
		statPanel("Reconcile errors (range)", "Reconciles that returned an error over the dashboard's time range.", "short", 6,
			thresholds("green", 1, "red"), nil,
			query(`sum(increase(controller_runtime_reconcile_errors_total{`+sel+`}[$__range]))`, "errors")),
		statPanel("Work queue depth", "Items waiting to be reconciled now.", "short", 6,
			thresholds("green", 100, "orange", 1000, "red"), nil,
			query(`sum(workqueue_depth{`+sel+`})`, "depth")),
		timeseriesPanel("Leader per replica", "1 on the replica that holds the lease.", "bool", 24,
			query(`max by (cluster, instance) (`+leader+`)`, "{{cluster}} {{instance}}")),
	).row("Reconcile").add(
		timeseriesPanel("Reconcile rate by result", "Reconciles per second by controller and result (success, error, requeue, requeue_after).", "ops", 12,
			query(`sum by (controller, result) (rate(controller_runtime_reconcile_total{`+sel+`}[$__rate_interval]))`, "{{controller}} {{result}}")),
		timeseriesPanel("Reconcile errors", "Errors, terminal errors and panics per second. Any sustained rate means reconciles keep failing: read the operator's logs and the objects' conditions.", "ops", 12,
			query(`sum by (controller) (rate(controller_runtime_reconcile_errors_total{`+sel+`}[$__rate_interval]))`, "{{controller}} errors"),
			query(`sum by (controller) (rate(controller_runtime_terminal_reconcile_errors_total{`+sel+`}[$__rate_interval]))`, "{{controller}} terminal"),
			query(`sum by (controller) (rate(controller_runtime_reconcile_panics_total{`+sel+`}[$__rate_interval]))`, "{{controller}} panics")),
		timeseriesPanel("Reconcile latency", "p50 and p99 time of one reconcile.", "s", 12,
			query(`histogram_quantile(0.5, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{controller}} p50"),
			query(`histogram_quantile(0.99, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{controller}} p99")),
		timeseriesPanel("Active workers", "Reconciles running now against the configured maximum (--reconcile-concurrency). Workers pinned at the maximum with a growing queue mean the operator is saturated.", "short", 12,
			query(`sum by (controller) (controller_runtime_active_workers{`+sel+`})`, "{{controller}} active"),
			query(`max by (controller) (controller_runtime_max_concurrent_reconciles{`+sel+`})`, "{{controller}} max")),
	).row("Work queue").add(
		timeseriesPanel("Queue depth", "Items waiting per controller.", "short", 8,
			query(`sum by (controller) (workqueue_depth{`+sel+`})`, "{{controller}}")),
		timeseriesPanel("Queue wait", "p50 and p99 time an item waits in the queue before a worker takes it.", "s", 8,
			query(`histogram_quantile(0.5, sum by (controller, le) (rate(workqueue_queue_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{controller}} p50"),
			query(`histogram_quantile(0.99, sum by (controller, le) (rate(workqueue_queue_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{controller}} p99")),
		timeseriesPanel("Adds and retries", "Items added to the queue and rate-limited retries per second.", "ops", 8,
			query(`sum by (controller) (rate(workqueue_adds_total{`+sel+`}[$__rate_interval]))`, "{{controller}} adds"),
			query(`sum by (controller) (rate(workqueue_retries_total{`+sel+`}[$__rate_interval]))`, "{{controller}} retries")),
		timeseriesPanel("Longest running reconcile", "How long the longest reconcile in flight has been running; unfinished work is the sum over all in flight. A value that keeps growing is a stuck reconcile.", "s", 12,
			query(`max by (controller) (workqueue_longest_running_processor_seconds{`+sel+`})`, "{{controller}} longest"),
			query(`sum by (controller) (workqueue_unfinished_work_seconds{`+sel+`})`, "{{controller}} unfinished")),
		timeseriesPanel("Work duration", "p99 time a worker spends on one item.", "s", 12,
			query(`histogram_quantile(0.99, sum by (controller, le) (rate(workqueue_work_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{controller}} p99")),
	).row("Kubernetes API").add(
		timeseriesPanel("API requests by method and code", "The operator's requests to the API server per second. 429 means the API server throttled it (API Priority and Fairness); 5xx, that the API server failed.", "reqps", 12,
			query(`sum by (method, code) (rate(rest_client_requests_total{`+inst+`}[$__rate_interval]))`, "{{method}} {{code}}")),
		timeseriesPanel("Failed and throttled API requests", "Requests answered 429 or 5xx per second (0 when none).", "reqps", 12,
			query(`sum(rate(rest_client_requests_total{`+inst+`, code=~"429|5.."}[$__rate_interval])) or vector(0)`, "429 and 5xx")),
		timeseriesPanel("API request latency", "p99 time of the operator's requests to the API server, by verb. Rising latency with a flat request rate means the API server (or etcd) is the bottleneck.", "s", 12,
			query(`histogram_quantile(0.99, sum by (verb, le) (rate(rest_client_request_duration_seconds_bucket{`+inst+`}[$__rate_interval])))`, "{{verb}} p99")),
		timeseriesPanel("Client-side throttling", "p99 time requests waited in the operator's own rate limiter (--kube-api-qps, --kube-api-burst). Above a few milliseconds, raise the limits.", "s", 12,
			query(`histogram_quantile(0.99, sum by (le) (rate(rest_client_rate_limiter_duration_seconds_bucket{`+inst+`}[$__rate_interval])))`, "p99")),
		timeseriesPanel("PodGroup writes", "Volcano PodGroups created or updated per second. Writes only happen when a gang's size changes; a steady rate with no scaling is a reconcile fighting another writer.", "ops", 12,
			query(`sum(rate(gpulab_podgroup_writes_total{`+inst+`}[$__rate_interval]))`, "PodGroup writes")),
		timeseriesPanel("Resident memory", "Resident memory of each replica; it follows the number of gpulab pods cached, not the cluster's.", "bytes", 12,
			query(`process_resident_memory_bytes{`+inst+`} and on (cluster, instance) controller_runtime_max_concurrent_reconciles{`+inst+`}`, "{{instance}} RSS")),
	)
}
