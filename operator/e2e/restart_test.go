package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	pollpkg "github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/operator/internal/manager"
	"github.com/gpulab/gpulab/testbeds/local"
	"github.com/gpulab/gpulab/testbeds/local/localtest"
)

const (
	// restartGangs gangs of a head and 2 workers × 4 GPUs fill half the fleet.
	restartGangs = 100
	restartFleet = "dgx-h100=100"
	// partialLimit is how long a gang may be seen partly bound once the
	// restarts are over: Volcano binds a gang's pods one call at a time. A
	// gang the old scheduler was binding when the API server went away is
	// finished by the new one, so its time is counted from the end of the
	// restarts, not from first sight: the API server serves lists before
	// it reports ready, and on a loaded machine its restart alone took 66 s.
	partialLimit = 20 * time.Second
	restartReady = 5 * time.Minute
)

// TestRecoversFromControlPlaneRestarts creates 100 gangs and, while the
// operator is creating their pods, restarts kube-apiserver and then
// vc-scheduler. The operator is never restarted: every gang reaches Ready,
// none is seen partly bound for longer than a scheduler restart, no pod
// name ever holds a second pod, and the operator's reconcile errors during
// the outage show in its metrics.
func TestRecoversFromControlPlaneRestarts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fleet, err := local.ParseFleet(restartFleet)
	if err != nil {
		t.Fatal(err)
	}
	tb := localtest.Start(t, local.Options{Name: "gpulab-operator-restarts", Fleet: fleet})
	// A client limit that makes creation take tens of seconds (over 500
	// requests at 20/s), so the restart lands while the operator is still
	// creating pods and its failed reconciles can be counted, however fast
	// its reconciles are.
	c := startOperator(t, tb, manager.Options{ReconcileConcurrency: 16}, func(cfg *rest.Config) { cfg.QPS, cfg.Burst = 20, 20 })

	ns := namespace(t, c, "restarts")
	errorsBefore := reconcileErrors(t)
	obs := newGangObserver()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); obs.run(watchCtx, c, ns) }()
	defer func() { stopWatch(); <-watched }()

	for i := range restartGangs {
		gc := cluster(ns, fmt.Sprintf("g%03d", i), 2, h100)
		gc.Spec.WorkerGroups[0].GPUs.PerPod = new(int32(4))
		gc.Spec.Head.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("100m")
		if err := c.Create(ctx, gc); err != nil {
			t.Fatal(err)
		}
	}
	restart := func(component string) {
		start := time.Now()
		if err := tb.Restart(ctx, component); err != nil {
			t.Fatalf("restarting %s: %v", component, err)
		}
		t.Logf("%s restarted in %s, %d pods created so far", component, time.Since(start).Round(100*time.Millisecond), obs.created())
	}
	// Mid-creation: some of the gangs' pods exist, most do not yet.
	if err := pollpkg.Until(ctx, time.Minute, func() (bool, string) {
		n := obs.created()
		return n >= restartGangs*3/10, fmt.Sprintf("%d pods created", n)
	}); err != nil {
		t.Fatalf("waiting for pod creation to be under way: %v", err)
	}
	obs.restarting()
	restart("kube-apiserver")
	restart("vc-scheduler")
	obs.restartsDone(time.Now())

	allReady := func() (bool, string) {
		var list gpulabv1alpha1.GPUClusterList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, gc := range list.Items {
			if gc.Status.Phase == gpulabv1alpha1.ClusterReady {
				ready++
			}
		}
		return ready == restartGangs, fmt.Sprintf("%d of %d gangs Ready", ready, restartGangs)
	}
	if err := pollpkg.Until(ctx, restartReady, allReady); err != nil {
		t.Fatalf("after the restarts: %v", err)
	}
	stopWatch()
	<-watched
	for _, v := range obs.violations() {
		t.Error(v)
	}
	t.Logf("longest time a gang was seen partly bound after the restarts: %s", obs.longestPartial().Round(100*time.Millisecond))
	if n := obs.created(); n != restartGangs*3 {
		t.Errorf("%d pods were created for %d gangs of 3", n, restartGangs)
	}
	if errs := reconcileErrors(t) - errorsBefore; errs == 0 {
		t.Errorf("no reconcile error was counted while the API server was down: the outage is invisible in metrics")
	} else {
		t.Logf("controller_runtime_reconcile_errors_total{controller=gpucluster} grew by %d during the restarts", errs)
	}
}

// gangObserver lists the namespace's pods over and over (a list survives an
// API server restart where a watch would need care), recording every UID a
// pod name has had and how long each gang has been seen partly bound.
type gangObserver struct {
	mu           sync.Mutex
	uids         map[string]map[types.UID]bool
	partialSince map[string]time.Time
	problems     []string
	// inRestarts is set while the control plane restarts and settled when
	// they end: partial binding is timed from settled at the earliest.
	inRestarts bool
	settled    time.Time
	longest    time.Duration
}

func (o *gangObserver) restarting() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inRestarts = true
}

func (o *gangObserver) restartsDone(at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inRestarts, o.settled = false, at
}

func (o *gangObserver) longestPartial() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.longest
}

func newGangObserver() *gangObserver {
	return &gangObserver{uids: map[string]map[types.UID]bool{}, partialSince: map[string]time.Time{}}
}

func (o *gangObserver) run(ctx context.Context, c client.Client, ns string) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err == nil {
			o.observe(pods.Items, time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (o *gangObserver) observe(pods []corev1.Pod, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	bound, total := map[string]int{}, map[string]int{}
	for _, p := range pods {
		if o.uids[p.Name] == nil {
			o.uids[p.Name] = map[types.UID]bool{}
		}
		o.uids[p.Name][p.UID] = true
		if len(o.uids[p.Name]) == 2 {
			o.problems = append(o.problems, fmt.Sprintf("pod %s was created twice (a second pod in one slot)", p.Name))
		}
		gang := p.Labels[gpulabv1alpha1.ClusterLabel]
		total[gang]++
		if p.Spec.NodeName != "" {
			bound[gang]++
		}
	}
	for gang, n := range total {
		partial := bound[gang] > 0 && bound[gang] < 3 || bound[gang] > 0 && n < 3
		since, seen := o.partialSince[gang]
		if seen && since.Before(o.settled) {
			since = o.settled
		}
		switch {
		case !partial:
			delete(o.partialSince, gang)
		case !seen:
			o.partialSince[gang] = now
		case o.inRestarts:
			// timed once the restarts are over
		default:
			o.longest = max(o.longest, now.Sub(since))
			if now.Sub(since) > partialLimit {
				o.problems = append(o.problems, fmt.Sprintf("gang %s partly bound (%d of %d pods) for %s after the restarts", gang, bound[gang], n, now.Sub(since).Round(time.Second)))
				o.partialSince[gang] = now // report once per period
			}
		}
	}
}

func (o *gangObserver) created() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, uids := range o.uids {
		n += len(uids)
	}
	return n
}

func (o *gangObserver) violations() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.problems...)
}

// reconcileErrors reads controller-runtime's error counter for the
// GPUCluster controller.
func reconcileErrors(t *testing.T) int {
	t.Helper()
	return counter(t, "controller_runtime_reconcile_errors_total", "gpucluster")
}
