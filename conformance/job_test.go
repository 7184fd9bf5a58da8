package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/results"
)

// TestJob: two GPUJobs whose gangs fit only one at a time run back to
// back, and the second gang binds as soon as the first job finishes. On
// Volcano with nvidia.com/gpu a queue sized to one gang holds the second
// back; where no queue can (kube-scheduler's gangs have none, and Volcano
// v1.14's queues cannot count GPUs claimed through DRA) each gang takes
// more than half the free nodes, so the scheduler's all-or-nothing is what
// holds it back. It runs wherever gpulab is installed: the submitter
// (--submitter-image) sleeps and exits on a real kubelet; kwok's stages
// finish it on the local testbed.
func TestJob(t *testing.T) {
	const name = "job"
	queued := jobQueued()
	title := "two GPUJobs on a queue that fits one gang run back to back"
	if !queued {
		title = "two GPUJobs whose gangs do not fit together run back to back"
	}
	f := newPlan(name).
		assess(results.RequirementNone, title, func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			overCapacity(t)
			gpulabOnly(t, "GPUJob")
			s := newScenario(ctx, t, name)
			r := freeCapacityOrSkip(ctx, t)
			workers := footprint.JobWorkers(r, queued)
			queue := ""
			if queued {
				q := &schedulingv1beta1.Queue{
					ObjectMeta: metav1.ObjectMeta{Name: "gpulab-conformance-job-" + opts.RunID, Labels: runLabels()},
					Spec: schedulingv1beta1.QueueSpec{Weight: 1, Reclaimable: new(true),
						Capability: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(workers*r.NodeGPUs), resource.DecimalSI)}},
				}
				if err := s.c.Create(ctx, q); err != nil {
					fatalf(t, "creating queue: %v", err)
				}
				t.Cleanup(func() { _ = s.c.Delete(context.Background(), q) })
				queue = q.Name
			}
			for _, job := range []string{"first", "second"} {
				// A job's first cluster is <job>-1: watch it from the start.
				s.recorder.Expect(job+"-1", workers+1, time.Now())
				gc := gpuCluster(job, int32(workers), int32(r.NodeGPUs))
				if queued {
					gc.Spec.Scheduling.Queue = queue
				}
				j := &gpulabv1alpha1.GPUJob{
					ObjectMeta: metav1.ObjectMeta{Name: job},
					Spec: gpulabv1alpha1.GPUJobSpec{ClusterTemplate: &gc.Spec, Submitter: corev1.PodTemplateSpec{
						Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "submit"}}}}},
				}
				if err := s.createJob(ctx, j); err != nil {
					fatalf(t, "creating GPUJob %s: %v", job, err)
				}
			}
			first, second := waitJob(ctx, t, s, "first"), waitJob(ctx, t, s, "second")
			// The scheduler may bind either gang first: whichever did, the
			// other must not have bound while it held the queue or nodes.
			timelines := s.recorder.Timelines()
			if timelines[second.Status.ClusterName].AllBound.Before(timelines[first.Status.ClusterName].AllBound) {
				first, second = second, first
			}
			tl := timelines[second.Status.ClusterName]
			done := first.Status.CompletionTime.Time
			if tl.AllBound.IsZero() || tl.AllBound.Add(time.Second).Before(done) {
				failf(t, "the gang of job %s bound at %s, before job %s (whose gang bound first) finished at %s", second.Name, tl.AllBound, first.Name, done)
			} else {
				measured(results.Value(name, "first_finished_to_second_bound", "seconds", tl.AllBound.Sub(done).Seconds()))
			}
			s.checkInvariants()
			return ctx
		}).feature()
	testenv.Test(t, f)
}

// jobQueued says the job feature's gangs wait on a Volcano queue: only
// Volcano's gangs have queues, and only nvidia.com/gpu is what v1.14's
// queues can count.
func jobQueued() bool { return !nativeGangs() && !draMode() }

func freeCapacityOrSkip(ctx context.Context, t *testing.T) footprint.Room {
	r, err := freeCapacity(ctx, cluster.Client)
	if err != nil {
		fatalf(t, "reading capacity: %v", err)
	}
	if r.Whole < 1 {
		skipf(t, "no wholly free %d-GPU node", r.NodeGPUs)
	}
	return r
}

func waitJob(ctx context.Context, t *testing.T, s *scenario, name string) *gpulabv1alpha1.GPUJob {
	t.Helper()
	j := &gpulabv1alpha1.GPUJob{}
	err := waitFor(ctx, 2*opts.ReadyTimeout, func() (bool, string) {
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, j); err != nil {
			return false, err.Error()
		}
		return j.Status.Phase == gpulabv1alpha1.JobSucceeded, fmt.Sprintf("phase %q %+v", j.Status.Phase, j.Status.Conditions)
	})
	if err != nil {
		fatalf(t, "GPUJob %s did not succeed: %v", name, err)
	}
	return j
}
