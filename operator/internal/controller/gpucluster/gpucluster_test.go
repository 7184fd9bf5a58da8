package gpucluster_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

const waitTimeout = 30 * time.Second

func quantity(s string) resource.Quantity { return resource.MustParse(s) }

// TestGangSizedFromPodsAsBuilt creates a cluster whose pods have init
// containers, a restartable sidecar and RuntimeClass overhead, and checks
// that the PodGroup exists before any pod, is sized exactly from the pods as
// built, and that the cluster reaches Ready with its timestamps.
func TestGangSizedFromPodsAsBuilt(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata-" + ns}, Handler: "kata",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: quantity("250m"), corev1.ResourceMemory: quantity("64Mi")}}}
	if err := c.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}
	m := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})

	// Watch from now on, to see the order in which children are created.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	podWatch, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer podWatch.Stop()
	pgWatch, err := wc.Watch(ctx, &schedulingv1beta1.PodGroupList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer pgWatch.Stop()

	always := corev1.ContainerRestartPolicyAlways
	gc := testutil.NewCluster(ns, "sized", 3, 4)
	gc.Spec.Head.Template.Spec.RuntimeClassName = &rc.Name
	gc.Spec.Head.Template.Spec.InitContainers = []corev1.Container{
		{Name: "proxy", Image: "busybox", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: quantity("500m")}}},
		{Name: "fetch", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: quantity("2")}}},
	}
	gc.Spec.WorkerGroups[0].MinReplicas = new(int32(2))
	gc.Spec.WorkerGroups[0].Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = quantity("8Gi")
	gc.Spec.WorkerGroups = append(gc.Spec.WorkerGroups, gpulabv1alpha1.WorkerGroupSpec{
		Name: "cpu", Replicas: 1,
		Template: testutil.PodTemplate("cpu", corev1.ResourceList{corev1.ResourceCPU: quantity("1"), corev1.ResourceMemory: quantity("1Gi")}),
	})
	if err := c.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}

	var pgCreated, firstPod int64
	deadline := time.After(waitTimeout)
	for pgCreated == 0 || firstPod == 0 {
		select {
		case ev := <-pgWatch.ResultChan():
			if pgCreated == 0 && ev.Type == "ADDED" {
				pgCreated, _ = strconv.ParseInt(ev.Object.(client.Object).GetResourceVersion(), 10, 64)
			}
		case ev := <-podWatch.ResultChan():
			if firstPod == 0 && ev.Type == "ADDED" {
				firstPod, _ = strconv.ParseInt(ev.Object.(client.Object).GetResourceVersion(), 10, 64)
			}
		case <-deadline:
			t.Fatalf("timed out: PodGroup created at rv %d, first pod at rv %d", pgCreated, firstPod)
		}
	}
	if pgCreated >= firstPod {
		t.Fatalf("a pod (rv %d) was created before the PodGroup (rv %d)", firstPod, pgCreated)
	}

	var pg schedulingv1beta1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sized-pg"}, &pg); err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 4 {
		t.Errorf("minMember = %d, want 4 (head + 2 of 3 workers + 1 cpu)", pg.Spec.MinMember)
	}
	wantTasks := map[string]int32{"head": 1, "workers": 2, "cpu": 1}
	if len(pg.Spec.MinTaskMember) != len(wantTasks) {
		t.Errorf("minTaskMember = %v, want %v", pg.Spec.MinTaskMember, wantTasks)
	}
	for task, n := range wantTasks {
		if pg.Spec.MinTaskMember[task] != n {
			t.Errorf("minTaskMember[%s] = %d, want %d", task, pg.Spec.MinTaskMember[task], n)
		}
	}
	// head: max(1 + 0.5 sidecar, 2 init + 0.5 sidecar) + 0.25 overhead = 2.75 cpu, 64Mi;
	// workers: 2 × (4 cpu, 8Gi, 4 GPUs); cpu: 1 cpu, 1Gi.
	want := corev1.ResourceList{corev1.ResourceCPU: quantity("11750m"), corev1.ResourceMemory: quantity("17472Mi"), "nvidia.com/gpu": quantity("8")}
	for name, q := range want {
		got := (*pg.Spec.MinResources)[name]
		if got.Cmp(q) != 0 {
			t.Errorf("minResources[%s] = %s, want %s", name, got.String(), q.String())
		}
	}
	if len(*pg.Spec.MinResources) != len(want) {
		t.Errorf("minResources = %v, want only %v", *pg.Spec.MinResources, want)
	}
	if !metav1.IsControlledBy(&pg, gc) {
		t.Errorf("PodGroup is not controlled by the cluster")
	}

	testutil.Eventually(t, waitTimeout, "5 pods", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 5, fmt.Sprintf("%d pods", n)
	})
	for _, p := range testutil.ListPods(t, c, ns) {
		if p.Spec.SchedulerName != "volcano" || p.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey] != "sized-pg" {
			t.Errorf("pod %s: schedulerName %q, group %q", p.Name, p.Spec.SchedulerName, p.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey])
		}
		if !metav1.IsControlledBy(&p, gc) {
			t.Errorf("pod %s is not controlled by the cluster", p.Name)
		}
		if p.Labels[gpulabv1alpha1.GroupLabel] == "workers" {
			gpus := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
			if gpus.Value() != 4 || p.Annotations["volcano.sh/task-spec"] != "workers" {
				t.Errorf("worker %s: %s GPUs, task %q", p.Name, gpus.String(), p.Annotations["volcano.sh/task-spec"])
			}
		}
	}
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sized-head"}, &svc); err != nil || !metav1.IsControlledBy(&svc, gc) {
		t.Errorf("head Service missing or not controlled by the cluster: %v", err)
	}

	testutil.Eventually(t, waitTimeout, "Ready", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		got := testutil.GetCluster(t, c, ns, "sized")
		return got.Status.Phase == gpulabv1alpha1.ClusterReady, fmt.Sprintf("phase %q", got.Status.Phase)
	})
	got := testutil.GetCluster(t, c, ns, "sized")
	if got.Status.ReadyPods != 5 || got.Status.DesiredPods != 5 || got.Status.GPUs != 12 {
		t.Errorf("status ready/desired/GPUs = %d/%d/%d, want 5/5/12", got.Status.ReadyPods, got.Status.DesiredPods, got.Status.GPUs)
	}
	if got.Status.ScheduledTime == nil || got.Status.ReadyTime == nil {
		t.Errorf("scheduledTime %v, readyTime %v: both must be set", got.Status.ScheduledTime, got.Status.ReadyTime)
	}
	for _, typ := range []string{gpulabv1alpha1.ConditionSchedulable, gpulabv1alpha1.ConditionGangScheduled, gpulabv1alpha1.ConditionHeadReady, gpulabv1alpha1.ConditionReady} {
		if !meta.IsStatusConditionTrue(got.Status.Conditions, typ) {
			t.Errorf("condition %s is not True: %+v", typ, meta.FindStatusCondition(got.Status.Conditions, typ))
		}
	}
	t.Logf("API writes to Ready for 5 pods: %v; status writes by code: %v", m.Traffic.Snapshot(), m.Traffic.StatusCodes())
}

// TestScaleSuspendResume scales a running cluster up and down (highest
// index removed first), suspends it (pods deleted, then the PodGroup) and
// resumes it.
func TestScaleSuspendResume(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	gc := testutil.NewCluster(ns, "scale", 2, 8)
	if err := c.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	waitPods := func(want ...string) {
		t.Helper()
		sort.Strings(want)
		testutil.Eventually(t, waitTimeout, fmt.Sprintf("pods %v", want), func() (bool, string) {
			testutil.PlayKubelet(t, c, ns)
			var names []string
			for _, p := range testutil.ListPods(t, c, ns) {
				names = append(names, p.Name)
			}
			sort.Strings(names)
			return fmt.Sprint(names) == fmt.Sprint(want), fmt.Sprint(names)
		})
	}
	minMember := func(want int32) {
		t.Helper()
		testutil.Eventually(t, waitTimeout, fmt.Sprintf("minMember %d", want), func() (bool, string) {
			var pg schedulingv1beta1.PodGroup
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "scale-pg"}, &pg)
			return err == nil && pg.Spec.MinMember == want, fmt.Sprintf("minMember %d, err %v", pg.Spec.MinMember, err)
		})
	}
	update := func(mutate func(*gpulabv1alpha1.GPUCluster)) {
		t.Helper()
		// The operator writes status concurrently: retry on conflict.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := testutil.GetCluster(t, c, ns, "scale")
			mutate(cur)
			return c.Update(ctx, cur)
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitPods("scale-head", "scale-workers-0", "scale-workers-1")

	update(func(g *gpulabv1alpha1.GPUCluster) { g.Spec.WorkerGroups[0].Replicas = 4 })
	minMember(5)
	waitPods("scale-head", "scale-workers-0", "scale-workers-1", "scale-workers-2", "scale-workers-3")

	update(func(g *gpulabv1alpha1.GPUCluster) { g.Spec.WorkerGroups[0].Replicas = 1 })
	minMember(2)
	waitPods("scale-head", "scale-workers-0")

	update(func(g *gpulabv1alpha1.GPUCluster) { g.Spec.Suspend = true })
	waitPods()
	testutil.Eventually(t, waitTimeout, "PodGroup released and phase Suspended", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "scale-pg"}, &schedulingv1beta1.PodGroup{})
		phase := testutil.GetCluster(t, c, ns, "scale").Status.Phase
		return apierrors.IsNotFound(err) && phase == gpulabv1alpha1.ClusterSuspended, fmt.Sprintf("get PodGroup: %v, phase %q", err, phase)
	})

	update(func(g *gpulabv1alpha1.GPUCluster) { g.Spec.Suspend = false })
	minMember(2)
	waitPods("scale-head", "scale-workers-0")
	testutil.Eventually(t, waitTimeout, "Ready after resume", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		phase := testutil.GetCluster(t, c, ns, "scale").Status.Phase
		return phase == gpulabv1alpha1.ClusterReady, string(phase)
	})
}

// TestFailedPodIsReplaced: a worker that exits is deleted and recreated
// under the same name.
func TestFailedPodIsReplaced(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	if err := c.Create(ctx, testutil.NewCluster(ns, "heal", 2, 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "3 running pods", func() (bool, string) {
		n := testutil.PlayKubelet(t, c, ns)
		return n == 3, fmt.Sprintf("%d running", n)
	})
	victim := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "heal-workers-1"}, victim); err != nil {
		t.Fatal(err)
	}
	oldUID := victim.UID
	victim.Status.Phase = corev1.PodFailed
	if err := c.Status().Update(ctx, victim); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "heal-workers-1 replaced", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		p := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "heal-workers-1"}, p)
		return err == nil && p.UID != oldUID && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("err %v, uid changed %v, phase %s", err, p.UID != oldUID, p.Status.Phase)
	})
}

// TestRestartBetweenPodCreateAndStatusWrite: the first operator creates the
// pods but every status write fails, then it dies; a second one converges
// without creating or replacing a single pod.
func TestRestartBetweenPodCreateAndStatusWrite(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	broken := testutil.NewTraffic()
	broken.FailStatusWrites.Store(true)
	first := testutil.StartManager(t, env.Config, testutil.ManagerOptions{Traffic: broken})
	if err := c.Create(ctx, testutil.NewCluster(ns, "restart", 5, 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "6 pods created by the first operator", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 6, fmt.Sprintf("%d pods", n)
	})
	if phase := testutil.GetCluster(t, c, ns, "restart").Status.Phase; phase != "" {
		t.Fatalf("status was written (phase %q) despite the injected fault", phase)
	}
	first.Stop()
	uids := map[string]string{}
	for _, p := range testutil.ListPods(t, c, ns) {
		uids[p.Name] = string(p.UID)
	}

	second := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	testutil.Eventually(t, waitTimeout, "status written by the second operator", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "restart")
		return got.Status.Phase == gpulabv1alpha1.ClusterScheduling && got.Status.ObservedGeneration == 1, string(got.Status.Phase)
	})
	pods := testutil.ListPods(t, c, ns)
	if len(pods) != 6 {
		t.Fatalf("%d pods after restart, want 6", len(pods))
	}
	for _, p := range pods {
		if uids[p.Name] != string(p.UID) {
			t.Errorf("pod %s was replaced across the restart", p.Name)
		}
	}
	if n := second.Traffic.Count("POST pods"); n != 0 {
		t.Errorf("the second operator created %d pods, want 0", n)
	}
}

// TestRacingOperatorsNeverDuplicate runs two operators without leader
// election on one cluster: each one's cache lags the other's writes, yet
// every pod is created exactly once.
func TestRacingOperatorsNeverDuplicate(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	a := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	b := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	if err := c.Create(ctx, testutil.NewCluster(ns, "race", 20, 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "21 pods", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 21, fmt.Sprintf("%d pods", n)
	})
	// Let both settle: the cluster's status reflects all pods.
	testutil.Eventually(t, waitTimeout, "status", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "race")
		return got.Status.Phase == gpulabv1alpha1.ClusterScheduling, string(got.Status.Phase)
	})
	if created := a.Traffic.Count("POST pods") + b.Traffic.Count("POST pods"); created != 21 {
		t.Errorf("%d successful pod creates across both operators, want exactly 21", created)
	}
}

// TestStatusConflictConverges makes the operator's first status write
// conflict with another writer; it re-reads and converges.
func TestStatusConflictConverges(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	traffic := testutil.NewTraffic()
	traffic.BeforeStatusWrite = func() {
		// Another writer updates status first, moving the resourceVersion.
		gc := &gpulabv1alpha1.GPUCluster{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "conflict"}, gc); err != nil {
			return
		}
		meta.SetStatusCondition(&gc.Status.Conditions, metav1.Condition{Type: "External", Status: metav1.ConditionTrue, Reason: "Test", Message: "written by someone else"})
		_ = c.Status().Update(ctx, gc)
	}
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{Traffic: traffic})
	if err := c.Create(ctx, testutil.NewCluster(ns, "conflict", 1, 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "converged status", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "conflict")
		return got.Status.Phase == gpulabv1alpha1.ClusterScheduling, string(got.Status.Phase)
	})
	got := testutil.GetCluster(t, c, ns, "conflict")
	if !meta.IsStatusConditionTrue(got.Status.Conditions, "External") {
		t.Errorf("the other writer's condition was overwritten blindly: %+v", got.Status.Conditions)
	}
	if codes := traffic.StatusCodes(); codes[409] == 0 {
		t.Errorf("no status conflict happened; the test did not exercise the path (codes %v)", codes)
	}
}

// TestLeaderElection: with two replicas only the leader writes; when it
// stops, the other takes over.
func TestLeaderElection(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	first := testutil.StartManager(t, env.Config, testutil.ManagerOptions{LeaderElect: true})
	select {
	case <-first.Elected:
	case <-time.After(waitTimeout):
		t.Fatal("the first replica never became leader")
	}
	second := testutil.StartManager(t, env.Config, testutil.ManagerOptions{LeaderElect: true})
	if err := c.Create(ctx, testutil.NewCluster(ns, "leader", 2, 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "3 pods", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 3, fmt.Sprintf("%d pods", n)
	})
	select {
	case <-second.Elected:
		t.Fatal("both replicas are leaders")
	default:
	}
	if n := second.Traffic.Count("POST pods"); n != 0 {
		t.Errorf("the follower created %d pods", n)
	}

	first.Stop()
	select {
	case <-second.Elected:
	case <-time.After(waitTimeout):
		t.Fatal("the second replica never took over")
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := testutil.GetCluster(t, c, ns, "leader")
		cur.Spec.WorkerGroups[0].Replicas = 4
		return c.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "5 pods after failover", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 5, fmt.Sprintf("%d pods", n)
	})
	if n := second.Traffic.Count("POST pods"); n != 2 {
		t.Errorf("the new leader created %d pods, want 2", n)
	}
}
