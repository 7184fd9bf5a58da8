package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/cli"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
)

// TestController is the KAR-0063 plan: invalid GPUClusters are rejected
// with their messages, a valid one reaches Ready, and the operator's leader
// killed mid-flight (a process on local, the Lease holder's pod on a
// cluster) is taken over and recovers with no duplicate pods. The kill is
// disruptive: it runs only with --disruptive (on by default where the run
// made the cluster) and only while a second replica is Ready.
func TestController(t *testing.T) {
	const name = "controller"
	f := newPlan(name).
		assess(results.RequirementRobustController, "invalid GPUClusters are rejected with their messages", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			gpulabOnly(t, "GPUCluster validation")
			s := newScenario(ctx, t, name)
			cases := map[string]func(*gpulabv1alpha1.GPUCluster){
				"should have at least 1 items":                          func(g *gpulabv1alpha1.GPUCluster) { g.Spec.WorkerGroups = []gpulabv1alpha1.WorkerGroupSpec{} },
				"minReplicas must not exceed replicas":                  func(g *gpulabv1alpha1.GPUCluster) { g.Spec.WorkerGroups[0].MinReplicas = new(int32(9)) },
				"gpus.perPod and gpus.wholeNode are mutually exclusive": func(g *gpulabv1alpha1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs.WholeNode = true },
				"worker group names must be unique": func(g *gpulabv1alpha1.GPUCluster) {
					g.Spec.WorkerGroups = append(g.Spec.WorkerGroups, g.Spec.WorkerGroups[0])
				},
			}
			i := 0
			for msg, mutate := range cases {
				i++
				gc := gpuCluster(fmt.Sprintf("invalid-%d", i), 2, 1)
				mutate(gc)
				// Through add, labelled and recorded: one the cluster wrongly
				// accepts is still the run's to delete.
				err := s.add(ctx, gc)
				if err == nil || !strings.Contains(err.Error(), msg) {
					failf(t, "invalid GPUCluster: got %v, want an error containing %q", err, msg)
				}
			}
			return ctx
		}).
		assess(results.RequirementRobustController, "a valid GPUCluster reaches Ready", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			gpulabOnly(t, "GPUCluster reconciliation")
			s := newScenario(ctx, t, name)
			r, err := freeCapacity(ctx, cluster.Client)
			if err != nil {
				fatalf(t, "reading capacity: %v", err)
			}
			start := time.Now()
			s.gang(ctx, "valid", workerGroup{"workers", 2, int32(footprint.LatencyWorkerGPUs(r))})
			s.waitReady(ctx, "valid", opts.ReadyTimeout)
			measured(results.Value(name, "valid_create_to_ready", "seconds", time.Since(start).Seconds()))
			s.checkInvariants()
			return ctx
		}).
		assess(results.RequirementRobustController, cli.LeaderKillAssessment, func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			gpulabOnly(t, "the gpulab operator's leader failover")
			if !opts.Disruptive {
				skipf(t, "disruptive: it kills the operator's leader; --disruptive allows it (default on for local and kind, off on --profile=cluster)")
			}
			holder := cluster.LeaseHolder(ctx)
			if holder == "" {
				fatalf(t, "the operator's Lease %s/%s has no holder", cluster.LeaseNamespace(), profile.LeaseName)
			}
			kill, restore := leaderKiller(ctx, t)
			s := newScenario(ctx, t, name)
			// Workers without GPUs, many of them: creating the gang takes
			// several rounds of parallel creates, so a kill on the first
			// pod lands while the rest are still to be made. At most half
			// the pool's CPU, so the gang fits on small nodes (kind's).
			workers := crashWorkers(ctx, t)
			desired := int(workers) + 1
			// In the run's own namespace a pod quota holds the gang half
			// made: the leader creates half its pods and is refused the
			// rest, so the kill lands mid-creation however fast the
			// operator creates and however slowly the cluster kills (a
			// pod's deletion on kind). A shared --namespace gets none (it
			// would hold back its other pods too): there the kill follows
			// the first pod, racing the creates.
			made, lift := 1, func() {}
			if s.ownNS {
				made = desired / 2
				lift = holdPods(ctx, t, s, made)
				defer lift()
			}
			s.gang(ctx, "crash", workerGroup{"workers", workers, 0})
			// React to the pods' watch events themselves, not a poll.
			if err := s.recorder.WaitFor(ctx, 30*time.Second, "crash", func(tl measure.Timeline) bool { return tl.Pods >= made }); err != nil {
				fatalf(t, "the operator never created the gang's first %d pods: %v", made, err)
			}
			killed := time.Now()
			if err := kill(); errors.Is(err, errNoStandby) {
				skipf(t, "%v", err)
			} else if err != nil {
				fatalf(t, "killing the leader %s: %v", holder, err)
			}
			// Bring the killed replica back as a follower for what follows,
			// whatever this assessment concludes.
			defer restore()
			// No replica leads until the lease expires, so the pods that
			// exist now are what the killed leader made: fewer than desired
			// is the evidence that the kill interrupted creation. Only the
			// gang's pods count: --namespace may hold another tenant's.
			if n := crashPods(ctx, t, s); n >= desired {
				fatalf(t, "all %d pods existed when the leader was killed: the kill did not interrupt creation, so recovery was not tested", n)
			} else {
				t.Logf("leader killed with %d of %d pods created", n, desired)
			}
			if err := waitFor(ctx, time.Minute, func() (bool, string) {
				h := cluster.LeaseHolder(ctx)
				return h != "" && h != holder, "lease still held by " + h
			}); err != nil {
				fatalf(t, "no replica took over: %v", err)
			}
			failover := time.Since(killed)
			measured(results.Value(name, "leader_failover", "seconds", failover.Seconds()))
			// The new leader makes the rest once the quota is gone.
			lift()
			s.waitReady(ctx, "crash", opts.ReadyTimeout)
			measured(results.Value(name, "kill_to_ready", "seconds", time.Since(killed).Seconds()))
			if n := crashPods(ctx, t, s); n != desired {
				failf(t, "%d pods after recovery, want %d", n, desired)
			}
			s.checkInvariants()
			return ctx
		}).feature()
	testenv.Test(t, f)
}

// holdPods sets a quota of n pods on the scenario's namespace, and waits
// until the quota controller has counted it (until then the API server
// refuses every pod). lift deletes it; it may be called more than once.
func holdPods(ctx context.Context, t *testing.T, s *scenario, n int) (lift func()) {
	t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpulab-failover-hold"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(n), resource.DecimalSI)}}}
	if err := s.add(ctx, q); err != nil {
		fatalf(t, "holding the gang at %d pods with a quota: %v", n, err)
	}
	if err := waitFor(ctx, 30*time.Second, func() (bool, string) {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
			return false, err.Error()
		}
		_, counted := q.Status.Hard[corev1.ResourcePods]
		return counted, "the quota controller has not counted quota " + q.Name
	}); err != nil {
		fatalf(t, "%v", err)
	}
	return func() {
		if err := s.c.Delete(ctx, q); err != nil && !apierrors.IsNotFound(err) {
			failf(t, "lifting the pod quota: %v", err)
		}
	}
}

// crashPods counts the failover gang's pods: the run's (by its label) of
// the GPUCluster "crash", so another tenant's pod in --namespace is never
// counted.
func crashPods(ctx context.Context, t *testing.T, s *scenario) int {
	t.Helper()
	sel := client.MatchingLabels{RunIDLabel: opts.RunID, gpulabv1alpha1.ClusterLabel: "crash"}
	pods, err := cleanup.Pods(ctx, s.c, s.ns, sel)
	if err != nil {
		fatalf(t, "counting the gang's pods: %v", err)
	}
	return len(pods)
}

// errNoStandby is why a leader is not killed: no other replica is Ready
// to take over, so the kill would stop the operator, not test a failover.
var errNoStandby = errors.New("no second operator replica is Ready")

// leaderKiller returns how to kill the leading operator replica as a
// crash would, and how to bring it back: SIGKILL to the local profile's
// process (restarted after), or on a cluster a forced delete of the pod
// that holds the Lease (its Deployment replaces it). It skips the
// assessment when no second replica is Ready, and kill checks again just
// before it kills (errNoStandby).
func leaderKiller(ctx context.Context, t *testing.T) (kill func() error, restore func()) {
	if cluster.Profile == "local" {
		leader, err := cluster.Leader(ctx)
		if err != nil {
			fatalf(t, "%v", err)
		}
		standby := func() error {
			for _, op := range cluster.Operators {
				if op != leader && op.Ready(ctx) {
					return nil
				}
			}
			return fmt.Errorf("%w to take over from %s: killing it would stop gpulab, not test a failover", errNoStandby, leader.Name)
		}
		if err := standby(); err != nil {
			skipf(t, "%v", err)
		}
		kill = func() error {
			if err := standby(); err != nil {
				return err
			}
			return leader.Kill()
		}
		restore = func() {
			if err := leader.Start(ctx); err != nil {
				failf(t, "restarting %s: %v", leader.Name, err)
			}
		}
		return kill, restore
	}
	pod, err := cluster.LeaderPod(ctx)
	if err != nil {
		skipf(t, "no operator pod to kill: %v", err)
	}
	standby := func() error {
		names, err := cluster.Standbys(ctx, pod)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("%w to take over from %s/%s: killing it would stop gpulab on this cluster, not test a failover", errNoStandby, pod.Namespace, pod.Name)
		}
		return nil
	}
	if err := standby(); errors.Is(err, errNoStandby) {
		skipf(t, "%v", err)
	} else if err != nil {
		fatalf(t, "%v", err)
	}
	return func() error {
		if err := standby(); err != nil {
			return err
		}
		return cluster.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))
	}, func() {}
}

// crashWorkers is the failover gang's worker count: 48, or fewer where
// half the pool's allocatable CPU does not hold 49 pods of 100m.
func crashWorkers(ctx context.Context, t *testing.T) int32 {
	var nodes corev1.NodeList
	if err := cluster.Client.List(ctx, &nodes); err != nil {
		fatalf(t, "listing nodes: %v", err)
	}
	var milli int64
	for _, n := range nodes.Items {
		if fp.has(n.Name) {
			milli += n.Status.Allocatable.Cpu().MilliValue()
		}
	}
	return int32(max(2, min(48, milli/2/100-1)))
}
