package conformance

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sschedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/gfd"
)

// TestLatency creates --scale GPUClusters (1 head + 2 workers × 4 GPUs) at
// once and measures, from client-side watches, each cluster's time from
// create to PodGroup, all pods created, all bound, all Ready and status
// Ready; and, from the operator's /metrics, the work it took. Its
// overcommitted run evidences KAR-0053: more gangs than fit, none ever
// partly bound.
func TestLatency(t *testing.T) {
	const name = "latency"
	f := newPlan(name).
		assess(results.RequirementNone, "clusters created at once reach Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			r, err := freeCapacity(ctx, cluster.Client)
			if err != nil {
				fatalf(t, "reading capacity: %v", err)
			}
			n, w := footprint.LatencyClusters(opts.Scale, r), footprint.LatencyWorkerGPUs(r)
			if n < opts.Scale {
				t.Logf("capacity for %d clusters only (%d free GPUs in the footprint)", n, r.Free)
			}
			if n == 0 {
				skipf(t, "no room for one %d-GPU cluster in the footprint (%d free GPUs)", 2*w, r.Free)
			}
			op := watchOperator(ctx, t)
			start := time.Now()
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("lat-%03d", i)
			}
			throttled, _ := measure.ReadClientThrottle()
			s.gangsAtOnce(ctx, names, workerGroup{"workers", 2, int32(w)})
			// The suite's own client limiter, outside every phase.
			if after, err := measure.ReadClientThrottle(); err == nil {
				measured(results.Value(name, "client_throttle_per_gang", "seconds", after.Sub(throttled).Seconds/float64(n)))
			}
			timeout := opts.ReadyTimeout + time.Duration(n)*200*time.Millisecond
			err = waitFor(ctx, timeout, func() (bool, string) {
				ready, bound, partial := 0, 0, 0
				for name, tl := range s.recorder.Timelines() {
					if gangReady(tl) {
						ready++
					}
					if !tl.AllBound.IsZero() {
						bound++
					}
					if b := s.recorder.Bound(name); b > 0 && b < tl.Desired {
						partial++
					}
				}
				return ready == n, fmt.Sprintf("%d/%d Ready, %d bound, %d partly bound now", ready, n, bound, partial)
			})
			if err != nil {
				fatalf(t, "%v", err)
			}
			wall := time.Since(start)
			record(name, s.recorder.Timelines(), n, wall, op.stop(ctx, t))
			measured(results.Value(name, "longest_partial_binding", "seconds", s.recorder.LongestPartial(time.Now()).Seconds()))
			recordGangShape(ctx, t, s, name)
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "more gangs than capacity: none is ever partly bound, each binds as room frees", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			overCapacity(t)
			s := newScenario(ctx, t, name)
			r, err := freeCapacity(ctx, cluster.Client)
			if err != nil {
				fatalf(t, "reading capacity: %v", err)
			}
			// Gangs of two whole nodes, more than fit at once.
			fits, n := footprint.Overcommitted(r)
			if fits < 1 {
				skipf(t, "needs 2 whole free %d-GPU nodes in the footprint, found %d", r.NodeGPUs, r.Whole)
			}
			for i := range n {
				s.gang(ctx, fmt.Sprintf("over-%03d", i), workerGroup{"workers", 2, int32(r.NodeGPUs)})
			}
			// Free the room of each gang as soon as it is Ready, so the
			// waiting ones bind in turn.
			done := map[string]bool{}
			err = waitFor(ctx, opts.ReadyTimeout+time.Duration(n)*time.Second, func() (bool, string) {
				for name, tl := range s.recorder.Timelines() {
					if !done[name] && gangReady(tl) {
						done[name] = true
						s.delete(ctx, name)
					}
				}
				return len(done) == n, fmt.Sprintf("%d of %d gangs were Ready", len(done), n)
			})
			if err != nil {
				fatalf(t, "%v", err)
			}
			var waits []float64
			for _, tl := range s.recorder.Timelines() {
				if !tl.AllBound.IsZero() {
					waits = append(waits, tl.AllBound.Sub(tl.Created).Seconds())
				}
			}
			addTimelines(name+"/overcommitted", s.recorder.Timelines())
			measured(results.Distribution(name, "overcommitted_create_to_all_bound", "seconds", waits),
				results.Value(name, "overcommitted_gangs", "count", float64(n)))
			s.checkInvariants()
			return ctx
		}).feature()
	testenv.Test(t, f)
}

// operatorWatch is the operator under test seen from its /metrics: a
// scrape before and after a run (the work it took is the difference) and
// its resident memory sampled in between.
type operatorWatch struct {
	url    string
	before measure.Scrape
	rss    float64
	done   chan struct{}
	exited chan struct{}
}

// operatorDelta is what an operatorWatch saw.
type operatorDelta struct {
	before, after measure.Scrape
	rssMax        float64
}

// operatorControllers is each workload's controller as controller-runtime
// labels its metrics (KubeRay's RayCluster controller is unnamed: the kind).
var operatorControllers = map[string]string{"gpucluster": "gpucluster", "raycluster": "raycluster"}

// watchOperator starts watching the operator that reconciles the run's
// workload: --operator-metrics-url, or on the local profile the one it
// runs. With neither (or a Volcano Job, reconciled by Volcano's own
// controller) it watches nothing and the run records no operator numbers.
func watchOperator(ctx context.Context, t *testing.T) *operatorWatch {
	w := &operatorWatch{url: opts.OperatorMetricsURL, done: make(chan struct{}), exited: make(chan struct{})}
	if _, ok := operatorControllers[opts.Workload]; !ok {
		w.url = ""
	} else if w.url == "" {
		url, err := cluster.OperatorMetricsURL(ctx, opts.Workload)
		if err != nil {
			fatalf(t, "finding the operator's metrics: %v", err)
		}
		w.url = url
	}
	if w.url == "" {
		close(w.exited)
		return w
	}
	var err error
	if w.before, err = measure.ScrapeURL(ctx, w.url); err != nil {
		fatalf(t, "scraping the operator at %s: %v", w.url, err)
	}
	w.rss = w.before.Sum("process_resident_memory_bytes", nil)
	rssURL, err := measure.Only(w.url, "process_resident_memory_bytes")
	if err != nil {
		fatalf(t, "%v", err)
	}
	go func() {
		defer close(w.exited)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if s, err := measure.ScrapeURL(ctx, rssURL); err == nil {
					w.rss = max(w.rss, s.Sum("process_resident_memory_bytes", nil))
				}
			}
		}
	}()
	return w
}

// stop ends the sampling and takes the last scrape.
func (w *operatorWatch) stop(ctx context.Context, t *testing.T) operatorDelta {
	close(w.done)
	<-w.exited
	if w.url == "" {
		return operatorDelta{}
	}
	after, err := measure.ScrapeURL(ctx, w.url)
	if err != nil {
		fatalf(t, "scraping the operator at %s: %v", w.url, err)
	}
	return operatorDelta{before: w.before, after: after, rssMax: max(w.rss, after.Sum("process_resident_memory_bytes", nil))}
}

// recordGangShape records one gang's PodGroup as Volcano sees it
// (minMember and minResources) and fails if the gangs differ: a comparison
// of two operators holds only if both asked Volcano for the same gangs.
func recordGangShape(ctx context.Context, t *testing.T, s *scenario, feature string) {
	if nativeGangs() {
		recordNativeGangShape(ctx, t, s, feature)
		return
	}
	var all schedulingv1beta1.PodGroupList
	if err := s.c.List(ctx, &all, client.InNamespace(s.ns)); err != nil {
		fatalf(t, "listing PodGroups: %v", err)
	}
	// The scenario's own gangs only: --namespace may hold others.
	var pgs schedulingv1beta1.PodGroupList
	kind := workload().recorded().Kind()
	for _, pg := range all.Items {
		if ref := metav1.GetControllerOf(&pg); ref != nil && ref.Kind == kind && s.owns(ref.Name) {
			pgs.Items = append(pgs.Items, pg)
		}
	}
	if len(pgs.Items) == 0 {
		fatalf(t, "no PodGroup of the scenario's gangs in %s", s.ns)
	}
	shape := func(pg *schedulingv1beta1.PodGroup) [4]float64 {
		res := pg.Spec.MinResources
		if res == nil {
			res = &corev1.ResourceList{}
		}
		cpu, mem, gpu := (*res)[corev1.ResourceCPU], (*res)[corev1.ResourceMemory], (*res)[gfd.GPUResource]
		return [4]float64{float64(pg.Spec.MinMember), float64(cpu.MilliValue()), float64(mem.Value()), float64(gpu.Value())}
	}
	first := shape(&pgs.Items[0])
	for i := range pgs.Items[1:] {
		if got := shape(&pgs.Items[i+1]); got != first {
			failf(t, "PodGroups %s and %s ask for different gangs (minMember, CPU millicores, memory bytes, GPUs): %v, %v",
				pgs.Items[0].Name, pgs.Items[i+1].Name, first, got)
		}
	}
	measured(results.Value(feature, "gang_min_member", "pods", first[0]),
		results.Value(feature, "gang_min_cpu", "millicores", first[1]),
		results.Value(feature, "gang_min_memory", "bytes", first[2]),
		results.Value(feature, "gang_min_gpus", "gpus", first[3]))
}

// record turns timelines and the operator's metric deltas into
// measurements.
func record(feature string, timelines map[string]measure.Timeline, n int, wall time.Duration, op operatorDelta) {
	phases := map[string][]float64{}
	add := func(phase string, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			phases[phase] = append(phases[phase], to.Sub(from).Seconds())
		}
	}
	var spreads []float64
	var lag time.Duration
	for _, tl := range timelines {
		if !tl.AllBound.IsZero() {
			spreads = append(spreads, tl.BindSpread.Seconds())
		}
		lag = max(lag, tl.WatchLag)
		add("create_to_podgroup", tl.Created, tl.PodGroup)
		add("create_to_pods_created", tl.Created, tl.PodsCreated)
		add("create_to_all_bound", tl.Created, tl.AllBound)
		add("create_to_pods_ready", tl.Created, tl.PodsReady)
		add("create_to_status_ready", tl.Created, tl.StatusReady)
		add("pods_ready_to_status_ready", tl.PodsReady, tl.StatusReady)
		add("issue_to_created", tl.Issued, tl.Created)
		add("create_to_claims_created", tl.Created, tl.ClaimsCreated)
		add("create_to_claims_allocated", tl.Created, tl.ClaimsAllocated)
	}
	addTimelines(feature, timelines)
	reported := append(slices.Clone(results.LatencyPhases), "pods_ready_to_status_ready", "issue_to_created")
	if draMode() {
		// The scheduler allocates a pod's claims before it binds it.
		reported = append(reported, "create_to_claims_created", "create_to_claims_allocated")
	}
	for _, phase := range reported {
		measured(results.Distribution(feature, phase, "seconds", phases[phase]))
	}
	measured(results.Distribution(feature, "bind_spread", "seconds", spreads),
		results.Value(feature, "watch_lag_max", "seconds", lag.Seconds()))
	measured(results.Value(feature, "clusters", "count", float64(n)), results.Value(feature, "wall", "seconds", wall.Seconds()))
	if span := creationSpan(timelines); span > 0 {
		measured(results.Value(feature, "gangs_per_second", "gangs/s", float64(n)/span.Seconds()))
	}
	if span := measure.Makespan(timelines); span > 0 {
		measured(results.Value(feature, "burst_makespan", "seconds", span.Seconds()),
			results.Value(feature, "burst_gangs_per_second", "gangs/s", float64(n)/span.Seconds()))
	}
	before, after := op.before, op.after
	if before == nil || after == nil {
		return
	}
	name := operatorControllers[opts.Workload]
	ctrl := map[string]string{"controller": name}
	delta := func(metric string, match map[string]string) float64 {
		return after.Sum(metric, match) - before.Sum(metric, match)
	}
	requests := func(label, value string) float64 {
		return delta("rest_client_requests_total", map[string]string{label: value})
	}
	measured(
		results.Value(feature, "reconciles_per_cluster", "count", delta("controller_runtime_reconcile_total", ctrl)/float64(n)),
		results.Value(feature, "reconcile_errors", "count", delta("controller_runtime_reconcile_errors_total", ctrl)),
		results.Value(feature, "queue_wait_p99", "seconds", measure.HistogramQuantileDelta(before, after, "workqueue_queue_duration_seconds", map[string]string{"name": name}, 0.99)),
		results.Value(feature, "api_requests_per_cluster", "requests", delta("rest_client_requests_total", nil)/float64(n)),
		results.Value(feature, "api_writes_per_cluster", "requests",
			(requests("method", "POST")+requests("method", "PUT")+requests("method", "PATCH")+requests("method", "DELETE"))/float64(n)),
		results.Value(feature, "api_conflicts", "requests", requests("code", "409")),
		results.Value(feature, "operator_cpu_per_cluster", "seconds", delta("process_cpu_seconds_total", nil)/float64(n)),
		results.Value(feature, "operator_rss_max", "bytes", op.rssMax),
		// What a gang costs in memory once everything is cached.
		results.Value(feature, "operator_heap_per_cluster", "bytes", after.Sum("go_memstats_heap_inuse_bytes", nil)/float64(n)),
	)
}

// creationSpan is the operator's part of the burst: from the first
// cluster's creation to the moment the last cluster's pods all existed.
// Zero when some cluster never had all its pods.
func creationSpan(timelines map[string]measure.Timeline) time.Duration {
	var first, last time.Time
	for _, tl := range timelines {
		if tl.PodsCreated.IsZero() {
			return 0
		}
		if first.IsZero() || tl.Created.Before(first) {
			first = tl.Created
		}
		if tl.PodsCreated.After(last) {
			last = tl.PodsCreated
		}
	}
	return last.Sub(first)
}

// addTimelines keeps each cluster's milestones for report.html.
func addTimelines(feature string, timelines map[string]measure.Timeline) {
	var first time.Time
	for _, tl := range timelines {
		if !tl.Created.IsZero() && (first.IsZero() || tl.Created.Before(first)) {
			first = tl.Created
		}
	}
	since := func(from, to time.Time) float64 {
		if from.IsZero() || to.IsZero() {
			return -1
		}
		return to.Sub(from).Seconds()
	}
	names := make([]string, 0, len(timelines))
	for name := range timelines {
		names = append(names, name)
	}
	sort.Strings(names)
	mu.Lock()
	defer mu.Unlock()
	if !first.IsZero() {
		if run.TimelineOrigins == nil {
			run.TimelineOrigins = map[string]time.Time{}
		}
		run.TimelineOrigins[feature] = first
	}
	for _, name := range names {
		tl := timelines[name]
		if tl.Created.IsZero() {
			continue
		}
		run.Timelines = append(run.Timelines, results.Timeline{
			Feature: feature, Cluster: name, Start: tl.Created.Sub(first).Seconds(),
			PodGroup: since(tl.Created, tl.PodGroup), PodsCreated: since(tl.Created, tl.PodsCreated),
			AllBound: since(tl.Created, tl.AllBound), PodsReady: since(tl.Created, tl.PodsReady), StatusReady: since(tl.Created, tl.StatusReady),
		})
	}
}

// recordNativeGangShape records what kube-scheduler's PodGroups ask for:
// their gang minCount only, since the native API has no minimum
// resources (the operator says so in GangPolicyComplete).
func recordNativeGangShape(ctx context.Context, t *testing.T, s *scenario, feature string) {
	var all k8sschedulingv1beta1.PodGroupList
	if err := s.c.List(ctx, &all, client.InNamespace(s.ns)); err != nil {
		fatalf(t, "listing PodGroups: %v", err)
	}
	kind := workload().recorded().Kind()
	var counts []int32
	for _, pg := range all.Items {
		if ref := metav1.GetControllerOf(&pg); ref != nil && ref.Kind == kind && s.owns(ref.Name) {
			if g := pg.Spec.SchedulingPolicy.Gang; g != nil {
				counts = append(counts, g.MinCount)
			} else {
				failf(t, "PodGroup %s has no gang policy", pg.Name)
			}
		}
	}
	if len(counts) == 0 {
		fatalf(t, "no scheduling.k8s.io PodGroup of the scenario's gangs in %s", s.ns)
	}
	for _, c := range counts[1:] {
		if c != counts[0] {
			failf(t, "PodGroups ask for different gangs: minCount %d and %d", counts[0], c)
		}
	}
	measured(results.Value(feature, "gang_min_member", "pods", float64(counts[0])))
}
