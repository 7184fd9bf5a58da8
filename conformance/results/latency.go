package results

// LatencyPhases are the latency feature's per-gang distributions, in the
// order a gang passes them.
var LatencyPhases = []string{"create_to_podgroup", "create_to_pods_created", "create_to_all_bound", "create_to_pods_ready", "create_to_status_ready"}

// LatencyCosts are the latency feature's single values worth comparing
// across operators and scales: API cost, reconciles, CPU, memory,
// throughput and gang safety. gangs_per_second is the creation
// throughput (first create to last pods created); burst_makespan is the
// whole burst (first create to last gang Ready) and
// burst_gangs_per_second the gangs over it.
var LatencyCosts = []string{"api_requests_per_cluster", "api_writes_per_cluster", "reconciles_per_cluster", "api_conflicts",
	"operator_cpu_per_cluster", "operator_rss_max", "operator_heap_per_cluster", "longest_partial_binding", "gangs_per_second",
	"burst_makespan", "burst_gangs_per_second"}
