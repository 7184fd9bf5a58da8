package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/results"
)

// TestGang is the KAR-0053 plan on Volcano, sized from the free capacity
// found: a gang that fits binds all-or-nothing; one GPU more than free
// binds nothing for the whole window and reports Unschedulable; K gangs
// contending for room for K/2 are never seen partly bound and the waiting
// ones bind as capacity frees; an exact fill binds.
func TestGang(t *testing.T) {
	const name = "gang"
	capacity := func(ctx context.Context, t *testing.T) (int, int) {
		free, whole, err := freeCapacity(ctx, cluster.Client)
		if err != nil {
			fatalf(t, "reading capacity: %v", err)
		}
		if whole < 2 {
			skipf(t, "needs 2 whole free 8-GPU nodes in the footprint, found %d", whole)
		}
		return free, whole
	}
	f := newPlan(name).
		assess(results.RequirementGangScheduling, "a gang that fits binds all-or-nothing and reaches Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			capacity(ctx, t)
			s.gang(ctx, "fits", workerGroup{"workers", 2, 8})
			s.waitReady(ctx, "fits", opts.ReadyTimeout)
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "a gang one GPU larger than free capacity binds no pod and reports Unschedulable", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			free, whole := capacity(ctx, t)
			// Volcano may see room outside the footprint, but every pod is
			// pinned to the pool, so the pool's free capacity is the room.
			// One more GPU than is free: every whole free node plus one GPU.
			extra := int32(free - whole*8 + 1)
			s.gang(ctx, "too-big", workerGroup{"workers", int32(whole), 8}, workerGroup{"extra", 1, extra})
			window := time.Now().Add(opts.WaitWindow)
			reported := false
			for time.Now().Before(window) && ctx.Err() == nil {
				if n := s.recorder.Bound("too-big"); n > 0 {
					fatalf(t, "%d pods of a gang that cannot fit were bound", n)
				}
				reported = reported || unschedulable(ctx, s)
				time.Sleep(100 * time.Millisecond)
			}
			// A window the run's end cut short proved nothing either way.
			if ctx.Err() != nil {
				fatalf(t, "stopped before the %s window ended: %v", opts.WaitWindow, context.Cause(ctx))
			}
			if !reported {
				failf(t, "the gang never reported Unschedulable: %s", workload().describe(ctx, s, "too-big"))
			}
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "K gangs contending for room for K/2 are never partly bound, and the waiting ones bind as capacity frees", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			_, whole := capacity(ctx, t)
			const k = footprint.ContendingGangs
			per := int32(whole / (k / 2)) // two gangs fill the whole free nodes
			for i := range k {
				s.gang(ctx, fmt.Sprintf("contend-%d", i), workerGroup{"workers", per, 8})
			}
			ready := map[string]bool{}
			start := time.Now()
			var firstFreed time.Time
			var bindAfterFree []float64
			for len(ready) < k {
				if ctx.Err() != nil {
					fatalf(t, "stopped with %d of %d contending gangs Ready: %v", len(ready), k, ctx.Err())
				}
				if time.Since(start) > 2*opts.ReadyTimeout {
					fatalf(t, "only %d of %d contending gangs became Ready", len(ready), k)
				}
				for i := range k {
					n := fmt.Sprintf("contend-%d", i)
					if ready[n] || !gangReady(s.recorder.Timelines()[n]) {
						continue
					}
					ready[n] = true
					if !firstFreed.IsZero() {
						bindAfterFree = append(bindAfterFree, time.Since(firstFreed).Seconds())
					}
					// Free its capacity for a waiting gang.
					if firstFreed.IsZero() {
						firstFreed = time.Now()
					}
					s.delete(ctx, n)
				}
				time.Sleep(100 * time.Millisecond)
			}
			measured(results.Distribution(name, "contended_free_to_ready", "seconds", bindAfterFree))
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "an exact fill of the free capacity binds", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			_, whole := capacity(ctx, t)
			s.gang(ctx, "exact", workerGroup{"workers", int32(whole), 8})
			s.waitReady(ctx, "exact", opts.ReadyTimeout)
			s.checkInvariants()
			return ctx
		}).feature()
	testenv.Test(t, f)
}

// unschedulable says whether the gang reports it cannot be placed: gpulab's
// Schedulable=False, or (any workload) its PodGroup's Unschedulable.
func unschedulable(ctx context.Context, s *scenario) bool {
	if opts.Workload == "gpucluster" && meta.IsStatusConditionFalse(s.get(ctx, "too-big").Status.Conditions, gpulabv1alpha1.ConditionSchedulable) {
		return true
	}
	pg, err := podGroupOf(ctx, s, "too-big")
	if err != nil {
		return false
	}
	for _, c := range pg.Status.Conditions {
		if c.Type == schedulingv1beta1.PodGroupUnschedulableType && c.Status == "True" {
			return true
		}
	}
	return false
}
