package bare

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/internal/poll/polltest"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// env is a real API server with Volcano's kinds and no controller: pods
// stay Pending until a test says they are Ready.
var env *envtest.Environment

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		e, err := envtest.Start(context.Background(), envtest.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		env = e
	}
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// namespace is a fresh namespace on the API server, deleted after the test.
func namespace(t *testing.T) string {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "floor-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// startFloor is a floor in ns whose client is c wrapped by funcs.
func startFloor(t *testing.T, ns string, funcs interceptor.Funcs) *Floor {
	t.Helper()
	if _, err := Client(ClientInput{Config: env.Config, Scheme: scheme(t), Unlimited: true}); err != nil {
		t.Fatalf("the floor's own client, unlimited: %v", err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // as Client's, unlimited
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := StartFloor(t.Context(), FloorInput{Config: env.Config, Scheme: scheme(t), Namespace: ns,
		Client: interceptor.NewClient(c, funcs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// gangObject is gang name (a head and 2 workers of 4 GPUs) in ns, not yet
// created.
func gangObject(ns, name string) *corev1.ConfigMap {
	cm := Object(name, map[string]string{runLabel: "r1"}, Spec{Queue: "q", Head: template("head", 0), Groups: []Group{
		{Name: "workers", Replicas: 2, Template: template("worker", 4)}}})
	cm.Namespace = ns
	return cm
}

// setReady writes pod name's Ready condition, as the kubelet would.
func setReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}

// TestFloorWritesStatusOnceAllPodsReady: the floor writes a gang's
// ConfigMap once, and only when its pods are all Ready; a pod going
// NotReady and Ready again writes nothing more.
func TestFloorWritesStatusOnceAllPodsReady(t *testing.T) {
	ns := namespace(t)
	var patches atomic.Int32
	f := startFloor(t, ns, interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*corev1.ConfigMap); ok {
			patches.Add(1)
		}
		return c.Patch(ctx, obj, patch, opts...)
	}})
	ctx := t.Context()
	cm := gangObject(ns, "g")
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := f.Created(ctx, cm); err != nil {
		t.Fatal(err)
	}
	pods := []string{"g-head", "g-workers-0", "g-workers-1"}
	status := func() (bool, time.Time) {
		got := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			t.Fatal(err)
		}
		return Status(got)
	}
	seen := func(want int) func() bool {
		return func() bool { ready, _, _ := f.Progress("g"); return ready == want }
	}
	for i, p := range pods[:2] {
		setReady(t, ns, p, true)
		polltest.Eventually(t, 10*time.Second, fmt.Sprintf("the floor seeing %d pods Ready", i+1), seen(i+1))
	}
	if ready, _ := status(); ready || patches.Load() != 0 {
		t.Fatalf("status Ready %v after %d writes with 2 of 3 pods Ready", ready, patches.Load())
	}
	lastReady := time.Now().Truncate(time.Second)
	setReady(t, ns, pods[2], true)
	polltest.Eventually(t, 10*time.Second, "the gang's status Ready", func() bool { ready, _ := status(); return ready })
	if _, since := status(); since.Before(lastReady) {
		t.Errorf("status Ready since %v, before the last pod was Ready (%v)", since, lastReady)
	}
	setReady(t, ns, pods[1], false)
	polltest.Eventually(t, 10*time.Second, "the floor seeing a pod NotReady", seen(2))
	setReady(t, ns, pods[1], true)
	polltest.Eventually(t, 10*time.Second, "the floor seeing the pods Ready again", seen(3))
	if _, desired, written := f.Progress("g"); desired != 3 || !written || patches.Load() != 1 || f.Err() != nil {
		t.Errorf("desired %d, written %v, %d status writes (%v): want 3, one write", desired, written, patches.Load(), f.Err())
	}
}

// TestFloorChildrenDoNotWaitForTheCreateSlots is a burst created one
// gang at a time (cleanup.CreateAll, parallel 1) whose children cannot be
// created until every gang's ConfigMap create was issued: children made
// in the create slots would hold them to the deadline. Each gang is whole
// (its PodGroup before its pods) and its clock started as its own create
// was issued, before any child existed.
func TestFloorChildrenDoNotWaitForTheCreateSlots(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const n = 6
	issued, started := make(chan struct{}), atomic.Int32{}
	f := startFloor(t, ns, interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		select {
		case <-issued:
		case <-ctx.Done():
			return fmt.Errorf("%s waited for the burst's creates until the deadline: the children held a create slot", obj.GetName())
		}
		return c.Create(ctx, obj, opts...)
	}})
	objs := make([]client.Object, n)
	for i := range objs {
		objs[i] = gangObject(ns, "g"+strconv.Itoa(i))
	}
	var mu sync.Mutex
	clocks := map[string]time.Time{}
	before := func(i int) {
		mu.Lock()
		clocks[objs[i].GetName()] = time.Now()
		mu.Unlock()
		if started.Add(1) == n {
			close(issued)
		}
	}
	after := func(i int) error { return f.Created(ctx, objs[i].(*corev1.ConfigMap)) }
	if _, err := cleanup.CreateAll(ctx, env.Client, objs, 1, before, after); err != nil {
		t.Fatal(err)
	}
	var pgs schedulingv1beta1.PodGroupList
	var pods corev1.PodList
	if err := env.Client.List(ctx, &pgs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pgs.Items) != n || len(pods.Items) != 3*n {
		t.Fatalf("%d PodGroups and %d pods, want %d and %d", len(pgs.Items), len(pods.Items), n, 3*n)
	}
	// Resource versions are etcd revisions: a pod created before its
	// gang's PodGroup has the lower one.
	pgRV := map[string]int64{}
	for _, pg := range pgs.Items {
		pgRV[metav1.GetControllerOf(&pg).Name], _ = strconv.ParseInt(pg.ResourceVersion, 10, 64)
	}
	for _, p := range pods.Items {
		gang := metav1.GetControllerOf(&p).Name
		rv, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
		if rv <= pgRV[gang] {
			t.Errorf("pod %s (revision %d) created before gang %s's PodGroup (revision %d)", p.Name, rv, gang, pgRV[gang])
		}
		if clock, first := clocks[gang], p.CreationTimestamp.Add(time.Second); !clock.Before(first) {
			t.Errorf("gang %s's clock started at %v, after its pod %s was created (%v)", gang, clock, p.Name, p.CreationTimestamp)
		}
	}
}
