package conformance

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/results"
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
			free, _, err := freeCapacity(ctx, cluster.Client)
			if err != nil {
				fatalf(t, "reading capacity: %v", err)
			}
			n := footprint.LatencyClusters(opts.Scale, footprint.Room{Free: free})
			if n < opts.Scale {
				t.Logf("capacity for %d clusters only (%d free GPUs in the footprint)", n, free)
			}
			if n == 0 {
				skipf(t, "no room for one 8-GPU cluster in the footprint (%d free GPUs)", free)
			}
			before := scrapeLeader(ctx, t)
			start := time.Now()
			for i := range n {
				s.gang(ctx, fmt.Sprintf("lat-%03d", i), workerGroup{"workers", 2, 4})
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
			after := scrapeLeader(ctx, t)
			record(name, s.recorder.Timelines(), n, wall, before, after)
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "more gangs than capacity: none is ever partly bound, each binds as room frees", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			_, whole, err := freeCapacity(ctx, cluster.Client)
			if err != nil {
				fatalf(t, "reading capacity: %v", err)
			}
			// Gangs of two whole nodes, more than fit at once.
			fits, n := footprint.Overcommitted(footprint.Room{Whole: whole})
			if fits < 1 {
				skipf(t, "needs 2 whole free 8-GPU nodes in the footprint, found %d", whole)
			}
			for i := range n {
				s.gang(ctx, fmt.Sprintf("over-%03d", i), workerGroup{"workers", 2, 8})
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

// scrapeLeader reads the gpulab operator's /metrics (local profile, gpulab
// workload): the work it took is the delta of two scrapes.
func scrapeLeader(ctx context.Context, t *testing.T) measure.Scrape {
	if cluster.Profile != "local" || opts.Workload != "gpucluster" {
		return nil
	}
	leader, err := cluster.Leader(ctx)
	if err != nil {
		fatalf(t, "%v", err)
	}
	s, err := measure.ScrapeURL(ctx, leader.MetricsURL())
	if err != nil {
		fatalf(t, "scraping the operator: %v", err)
	}
	return s
}

// record turns timelines and metric deltas into measurements.
func record(feature string, timelines map[string]measure.Timeline, n int, wall time.Duration, before, after measure.Scrape) {
	phases := map[string][]float64{}
	add := func(phase string, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			phases[phase] = append(phases[phase], to.Sub(from).Seconds())
		}
	}
	for _, tl := range timelines {
		add("create_to_podgroup", tl.Created, tl.PodGroup)
		add("create_to_pods_created", tl.Created, tl.PodsCreated)
		add("create_to_all_bound", tl.Created, tl.AllBound)
		add("create_to_pods_ready", tl.Created, tl.PodsReady)
		add("create_to_status_ready", tl.Created, tl.StatusReady)
		add("pods_ready_to_status_ready", tl.PodsReady, tl.StatusReady)
	}
	addTimelines(feature, timelines)
	for _, phase := range []string{"create_to_podgroup", "create_to_pods_created", "create_to_all_bound", "create_to_pods_ready", "create_to_status_ready", "pods_ready_to_status_ready"} {
		measured(results.Distribution(feature, phase, "seconds", phases[phase]))
	}
	measured(results.Value(feature, "clusters", "count", float64(n)), results.Value(feature, "wall", "seconds", wall.Seconds()))
	if before == nil || after == nil {
		return
	}
	ctrl := map[string]string{"controller": "gpucluster"}
	delta := func(metric string, match map[string]string) float64 {
		return after.Sum(metric, match) - before.Sum(metric, match)
	}
	reconciles := delta("controller_runtime_reconcile_total", ctrl)
	measured(
		results.Value(feature, "reconciles_per_cluster", "count", reconciles/float64(n)),
		results.Value(feature, "reconcile_errors", "count", delta("controller_runtime_reconcile_errors_total", ctrl)),
		results.Value(feature, "queue_wait_p99", "seconds", measure.HistogramQuantileDelta(before, after, "workqueue_queue_duration_seconds", map[string]string{"name": "gpucluster"}, 0.99)),
		results.Value(feature, "api_requests_per_cluster", "requests", delta("rest_client_requests_total", nil)/float64(n)),
		results.Value(feature, "api_writes_per_cluster", "requests",
			(delta("rest_client_requests_total", map[string]string{"method": "POST"})+delta("rest_client_requests_total", map[string]string{"method": "PUT"})+
				delta("rest_client_requests_total", map[string]string{"method": "PATCH"})+delta("rest_client_requests_total", map[string]string{"method": "DELETE"}))/float64(n)),
	)
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
