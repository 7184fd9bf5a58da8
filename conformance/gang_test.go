package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	k8sschedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/results"
)

// TestGang is the KAR-0053 plan on Volcano, sized from the free capacity
// found: a gang that fits binds all-or-nothing; with a filler holding one
// node, a gang one GPU more than free (but within the pool's total) binds
// nothing for the whole window and the scheduler holds its PodGroup
// Unschedulable; K gangs
// contending for room for K/2 are never seen partly bound and the waiting
// ones bind as capacity frees; an exact fill binds.
func TestGang(t *testing.T) {
	const name = "gang"
	capacity := func(ctx context.Context, t *testing.T) footprint.Room {
		r, err := freeCapacity(ctx, cluster.Client)
		if err != nil {
			fatalf(t, "reading capacity: %v", err)
		}
		if r.Whole < 2 {
			skipf(t, "needs 2 whole free %d-GPU nodes in the footprint, found %d", r.NodeGPUs, r.Whole)
		}
		return r
	}
	f := newPlan(name).
		assess(results.RequirementGangScheduling, "a gang that fits binds all-or-nothing and reaches Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			r := capacity(ctx, t)
			s.gang(ctx, "fits", workerGroup{"workers", 2, int32(r.NodeGPUs)})
			s.waitReady(ctx, "fits", opts.ReadyTimeout)
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "a gang that fits the pool but is one GPU larger than its free capacity binds no pod, held by the scheduler", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			overCapacity(t)
			s := newScenario(ctx, t, name)
			capacity(ctx, t)
			// A filler holds one whole node, so the gang fits the pool's
			// total (gpulab's own check lets it through and builds its
			// PodGroup) but not what is free: only the scheduler can hold
			// it back.
			filled := s.fillNode(ctx)
			r, err := freeCapacity(ctx, cluster.Client)
			if err != nil {
				fatalf(t, "reading capacity: %v", err)
			}
			// One more GPU than is free: every whole free node plus one GPU.
			extra := int32(r.Free - r.Whole*r.NodeGPUs + 1)
			s.gang(ctx, "too-big", workerGroup{"workers", int32(r.Whole), int32(r.NodeGPUs)}, workerGroup{"extra", 1, extra})
			t.Logf("filler holds %s; gang of %d GPUs against %d free", filled, r.Whole*r.NodeGPUs+int(extra), r.Free)
			window := time.Now().Add(opts.WaitWindow)
			// Held: the scheduler says Unschedulable, or (Volcano) keeps
			// the PodGroup unadmitted, Pending, through the whole window:
			// from v1.14 Volcano writes no condition on a PodGroup it
			// refuses to enqueue, as for a Job whose pods come only once
			// it is admitted.
			held, seenPending, admitted := false, false, false
			for time.Now().Before(window) && ctx.Err() == nil {
				if n := s.recorder.Bound("too-big"); n > 0 {
					fatalf(t, "%d pods of a gang that cannot fit the free capacity were bound", n)
				}
				held = held || heldByScheduler(ctx, s, "too-big")
				// A PodGroup its controller has not made yet is neither.
				if exists, pending := pendingPodGroup(ctx, s, "too-big"); exists {
					seenPending, admitted = seenPending || pending, admitted || !pending
				}
				time.Sleep(100 * time.Millisecond)
			}
			held = held || (seenPending && !admitted)
			// A window the run's end cut short proved nothing either way.
			if ctx.Err() != nil {
				fatalf(t, "stopped before the %s window ended: %v", opts.WaitWindow, context.Cause(ctx))
			}
			if opts.Workload == "gpucluster" && meta.IsStatusConditionFalse(s.get(ctx, "too-big").Status.Conditions, gpulabv1alpha1.ConditionSchedulable) {
				failf(t, "gpulab judged a gang that fits the pool's total capacity never schedulable: the scheduler was not asked")
			}
			if err := gangPodGroupExists(ctx, s, "too-big"); err != nil {
				failf(t, "the gang has no PodGroup, so no scheduler held it: %v", err)
			} else if !held {
				failf(t, "the scheduler never reported the gang's PodGroup Unschedulable, nor kept it Pending through the window: %s", workload().describe(ctx, s, "too-big"))
			}
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "K gangs contending for room for K/2 are never partly bound, and the waiting ones bind as capacity frees", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			overCapacity(t)
			s := newScenario(ctx, t, name)
			r := capacity(ctx, t)
			const k = footprint.ContendingGangs
			per := int32(r.Whole / (k / 2)) // k/2 gangs fill the whole free nodes
			room := r.Whole / int(per)      // gangs that fit at once
			for i := range k {
				s.gang(ctx, fmt.Sprintf("contend-%d", i), workerGroup{"workers", per, int32(r.NodeGPUs)})
			}
			ready := map[string]bool{}
			start := time.Now()
			// Each Ready gang is deleted at once, freeing room for one that
			// waits; a waiting gang is timed from the deletion that let it
			// in (measure.FreedToReady), the first wave not at all.
			var readyAt, freedAt []time.Time
			for len(ready) < k {
				if ctx.Err() != nil {
					fatalf(t, "stopped with %d of %d contending gangs Ready: %v", len(ready), k, ctx.Err())
				}
				if time.Since(start) > 2*opts.ReadyTimeout {
					fatalf(t, "only %d of %d contending gangs became Ready", len(ready), k)
				}
				var now []string
				tls := s.recorder.Timelines()
				for i := range k {
					if n := fmt.Sprintf("contend-%d", i); !ready[n] && gangReady(tls[n]) {
						now = append(now, n)
					}
				}
				slices.SortFunc(now, func(a, b string) int { return measure.ReadyAt(tls[a]).Compare(measure.ReadyAt(tls[b])) })
				for _, n := range now {
					ready[n] = true
					readyAt = append(readyAt, measure.ReadyAt(tls[n]))
					s.delete(ctx, n)
					freedAt = append(freedAt, time.Now())
				}
				time.Sleep(100 * time.Millisecond)
			}
			measured(results.Distribution(name, "contended_free_to_ready", "seconds", measure.FreedToReady(readyAt, freedAt, room)))
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementGangScheduling, "an exact fill of the free capacity binds", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := newScenario(ctx, t, name)
			r := capacity(ctx, t)
			s.gang(ctx, "exact", workerGroup{"workers", int32(r.Whole), int32(r.NodeGPUs)})
			s.waitReady(ctx, "exact", opts.ReadyTimeout)
			s.checkInvariants()
			return ctx
		}).feature()
	testenv.Test(t, f)
}

// heldByScheduler says whether the scheduler reports the gang's PodGroup
// Unschedulable: the scheduler's own verdict, not gpulab's.
func heldByScheduler(ctx context.Context, s *scenario, gang string) bool {
	if nativeGangs() {
		// kube-scheduler's verdict on the whole gang.
		pg, err := nativePodGroupOf(ctx, s, gang)
		if err != nil {
			return false
		}
		c := meta.FindStatusCondition(pg.Status.Conditions, k8sschedulingv1beta1.PodGroupInitiallyScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == k8sschedulingv1beta1.PodGroupReasonUnschedulable
	}
	pg, err := podGroupOf(ctx, s, gang)
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

// gangPodGroupExists says whether the gang has its scheduler's PodGroup.
func gangPodGroupExists(ctx context.Context, s *scenario, gang string) error {
	if nativeGangs() {
		_, err := nativePodGroupOf(ctx, s, gang)
		return err
	}
	_, err := podGroupOf(ctx, s, gang)
	return err
}

// pendingPodGroup says whether the gang's Volcano PodGroup exists and, if
// so, whether it is Pending: not admitted by the scheduler's enqueue.
// Kubernetes' own gangs have no such phase.
func pendingPodGroup(ctx context.Context, s *scenario, gang string) (exists, pending bool) {
	if nativeGangs() {
		return false, false
	}
	pg, err := podGroupOf(ctx, s, gang)
	if err != nil {
		return false, false
	}
	// A new PodGroup has no phase until Volcano gives it one: not admitted.
	return true, pg.Status.Phase == schedulingv1beta1.PodGroupPending || pg.Status.Phase == ""
}
