package gpucluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	k8sscheduling "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/operator/internal/testutil"
	"github.com/gpulab/gpulab/testbeds/local"
)

// TestNativeGangs runs scheduler: kubernetes clusters on a kube-apiserver
// with native gang scheduling on (the GenericWorkload gate and the
// scheduling.k8s.io versions of local.NativeGangAPIServerArgs), without
// Volcano: the PodGroup comes before any pod with minCount = minMember,
// pods join it, suspend deletes it, a foreign one is left alone, what the
// native API cannot say is a condition, and kube-scheduler binds a gang
// all or nothing.
func TestNativeGangs(t *testing.T) {
	needEnv(t)
	api := testutil.StartAPIServer(t, local.NativeGangAPIServerArgs()...)
	c := api.Client
	if err := testutil.CreateGPUNodes(context.Background(), c, 4); err != nil {
		t.Fatal(err)
	}
	testutil.StartManager(t, api.Config, testutil.ManagerOptions{})

	// Every subtest leaves its cluster's pods unbound (no scheduler runs
	// before the last one), and the last one's nodes take only its pods.
	t.Run("PodGroupBeforePods", func(t *testing.T) { nativeGangLifecycle(t, api) })
	t.Run("ForeignPodGroup", func(t *testing.T) { nativeForeignPodGroup(t, c) })
	t.Run("AllOrNothing", func(t *testing.T) { nativeAllOrNothing(t, api) })
}

func nativeCluster(ns, name string, workers, gpus int32) *gpulabv1alpha1.GPUCluster {
	gc := testutil.NewCluster(ns, name, workers, gpus)
	gc.Spec.Scheduling.Scheduler = gpulabv1alpha1.SchedulerKubernetes
	return gc
}

func getNativePodGroup(ctx context.Context, c client.Client, ns, name string) (*k8sscheduling.PodGroup, error) {
	pg := &k8sscheduling.PodGroup{}
	return pg, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pg)
}

func updateCluster(t *testing.T, c client.Client, ns, name string, mutate func(*gpulabv1alpha1.GPUCluster)) {
	t.Helper()
	// The operator writes status concurrently: retry on conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := testutil.GetCluster(t, c, ns, name)
		mutate(cur)
		return c.Update(context.Background(), cur)
	}); err != nil {
		t.Fatal(err)
	}
}

// nativeGangLifecycle: creation order, the PodGroup's policy and owner,
// the pods' membership, status and the GangPolicyComplete condition, an
// in-place resize, suspend (the PodGroup deleted, its protection
// finalizer held as no kube-controller-manager runs here) and resume,
// which creates no pod until the old PodGroup is gone.
func nativeGangLifecycle(t *testing.T, api *testutil.APIServer) {
	c := api.Client
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	wc, err := client.NewWithWatch(api.Config, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	podWatch, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer podWatch.Stop()
	pgWatch, err := wc.Watch(ctx, &k8sscheduling.PodGroupList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer pgWatch.Stop()

	gc := nativeCluster(ns, "native", 3, 2)
	gc.Spec.WorkerGroups[0].MinReplicas = new(int32(2))
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

	pg, err := getNativePodGroup(ctx, c, ns, "native-pg")
	if err != nil {
		t.Fatal(err)
	}
	if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 3 {
		t.Errorf("schedulingPolicy %+v, want gang minCount 3 (head + 2 of 3 workers)", pg.Spec.SchedulingPolicy)
	}
	cluster := testutil.GetCluster(t, c, ns, "native")
	if !metav1.IsControlledBy(pg, cluster) {
		t.Errorf("PodGroup owners %v, want controlled by the cluster", pg.OwnerReferences)
	}
	// One object, served in v1alpha3 as well.
	var alpha schedulingv1alpha3.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "native-pg"}, &alpha); err != nil || alpha.Spec.SchedulingPolicy.Gang == nil ||
		alpha.Spec.SchedulingPolicy.Gang.MinCount != 3 {
		t.Errorf("the PodGroup read as scheduling.k8s.io/v1alpha3: %+v, %v", alpha.Spec.SchedulingPolicy, err)
	}

	testutil.Eventually(t, waitTimeout, "4 pods in the PodGroup", func() (bool, string) {
		pods := testutil.ListPods(t, c, ns)
		for _, p := range pods {
			if g := p.Spec.SchedulingGroup; g == nil || g.PodGroupName == nil || *g.PodGroupName != "native-pg" {
				return false, fmt.Sprintf("pod %s schedulingGroup %+v", p.Name, g)
			}
			if p.Spec.SchedulerName != corev1.DefaultSchedulerName || p.Annotations["scheduling.k8s.io/group-name"] != "" {
				return false, fmt.Sprintf("pod %s schedulerName %q annotations %v", p.Name, p.Spec.SchedulerName, p.Annotations)
			}
		}
		return len(pods) == 4, fmt.Sprintf("%d pods", len(pods))
	})
	testutil.Eventually(t, waitTimeout, "status with the PodGroup and GangPolicyComplete", func() (bool, string) {
		st := testutil.GetCluster(t, c, ns, "native").Status
		cond := meta.FindStatusCondition(st.Conditions, gpulabv1alpha1.ConditionGangPolicyComplete)
		if st.PodGroup == nil || st.PodGroup.Name != "native-pg" || st.PodGroup.APIVersion != "scheduling.k8s.io/v1beta1" ||
			st.PodGroup.MinMember != 3 || st.PodGroup.Phase != "Pending" || st.PodGroup.MinResources != nil {
			return false, fmt.Sprintf("podGroup %+v", st.PodGroup)
		}
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != gpulabv1alpha1.ReasonGangPolicyPartial ||
			!strings.Contains(cond.Message, "minTaskMember {head:1, workers:2}") || !strings.Contains(cond.Message, "minResources") {
			return false, "GangPolicyComplete " + conditionString(cond)
		}
		return st.Phase == gpulabv1alpha1.ClusterScheduling, "phase " + string(st.Phase)
	})

	// minCount is mutable: a resize updates the same PodGroup.
	updateCluster(t, c, ns, "native", func(g *gpulabv1alpha1.GPUCluster) { g.Spec.WorkerGroups[0].MinReplicas = new(int32(3)) })
	testutil.Eventually(t, waitTimeout, "minCount 4 in place", func() (bool, string) {
		now, err := getNativePodGroup(ctx, c, ns, "native-pg")
		if err != nil {
			return false, err.Error()
		}
		return now.UID == pg.UID && now.Spec.SchedulingPolicy.Gang.MinCount == 4, fmt.Sprintf("uid %s minCount %d", now.UID, now.Spec.SchedulingPolicy.Gang.MinCount)
	})
	testutil.Eventually(t, waitTimeout, "every pod needed: GangPolicyComplete names minResources only", func() (bool, string) {
		cond := meta.FindStatusCondition(testutil.GetCluster(t, c, ns, "native").Status.Conditions, gpulabv1alpha1.ConditionGangPolicyComplete)
		return cond != nil && !strings.Contains(cond.Message, "minTaskMember") && strings.Contains(cond.Message, "minResources"), conditionString(cond)
	})

	updateCluster(t, c, ns, "native", func(g *gpulabv1alpha1.GPUCluster) { g.Spec.Suspend = true })
	testutil.Eventually(t, waitTimeout, "pods gone, PodGroup deleted, Suspended", func() (bool, string) {
		pods := testutil.ListPods(t, c, ns)
		now, err := getNativePodGroup(ctx, c, ns, "native-pg")
		deleted := apierrors.IsNotFound(err) || (err == nil && !now.DeletionTimestamp.IsZero())
		st := testutil.GetCluster(t, c, ns, "native").Status
		return len(pods) == 0 && deleted && st.Phase == gpulabv1alpha1.ClusterSuspended && st.PodGroup == nil,
			fmt.Sprintf("%d pods, PodGroup deleted %v (%v), phase %s", len(pods), deleted, err, st.Phase)
	})
	// kube-apiserver's PodGroupProtection admission put a finalizer on it;
	// kube-controller-manager would remove it now that no pod uses it.
	held, err := getNativePodGroup(ctx, c, ns, "native-pg")
	if err != nil || len(held.Finalizers) == 0 {
		t.Fatalf("expected the PodGroup to be held by its protection finalizer: %v, %v", held.Finalizers, err)
	}

	updateCluster(t, c, ns, "native", func(g *gpulabv1alpha1.GPUCluster) { g.Spec.Suspend = false })
	testutil.Eventually(t, waitTimeout, "resume waits for the old PodGroup", func() (bool, string) {
		cond := meta.FindStatusCondition(testutil.GetCluster(t, c, ns, "native").Status.Conditions, gpulabv1alpha1.ConditionGangScheduled)
		return cond != nil && cond.Reason == gpulabv1alpha1.ReasonPodsPending && strings.Contains(cond.Message, "being deleted"), conditionString(cond)
	})
	if pods := testutil.ListPods(t, c, ns); len(pods) != 0 {
		t.Fatalf("%d pods created while their PodGroup was being deleted", len(pods))
	}
	// Play kube-controller-manager's podgroup-protection controller.
	held.Finalizers = nil
	if err := c.Update(ctx, held); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "a new PodGroup and the pods again", func() (bool, string) {
		now, err := getNativePodGroup(ctx, c, ns, "native-pg")
		if err != nil || now.UID == held.UID || !now.DeletionTimestamp.IsZero() {
			return false, fmt.Sprintf("PodGroup %v", err)
		}
		n := len(testutil.ListPods(t, c, ns))
		return n == 4 && now.Spec.SchedulingPolicy.Gang.MinCount == 4, fmt.Sprintf("%d pods, minCount %d", n, now.Spec.SchedulingPolicy.Gang.MinCount)
	})
}

// nativeForeignPodGroup: a scheduling.k8s.io PodGroup under the cluster's
// name that the cluster does not control is never adopted, updated or
// deleted, also on suspend; the cluster reports the conflict and creates
// no pod.
func nativeForeignPodGroup(t *testing.T, c client.Client) {
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	foreign := &k8sscheduling.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-pg", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: types.UID("0c0ffee0-0000-4000-8000-000000000001"), Controller: new(true)}}},
		Spec: k8sscheduling.PodGroupSpec{SchedulingPolicy: k8sscheduling.PodGroupSchedulingPolicy{Gang: &k8sscheduling.GangSchedulingPolicy{MinCount: 7}}},
	}
	if err := c.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, nativeCluster(ns, "taken", 2, 1)); err != nil {
		t.Fatal(err)
	}
	gc := waitReadyReason(t, c, ns, "taken", gpulabv1alpha1.ReasonNameConflict, "PodGroup taken-pg", "Job.batch train")
	if gc.Status.Phase != gpulabv1alpha1.ClusterFailed {
		t.Errorf("phase %s, want Failed", gc.Status.Phase)
	}
	expectEvent(t, c, ns, gpulabv1alpha1.ReasonNameConflict, "PodGroup taken-pg")
	updateCluster(t, c, ns, "taken", func(g *gpulabv1alpha1.GPUCluster) { g.Spec.Suspend = true })
	time.Sleep(2 * time.Second) // the suspend's reconciles
	pg, err := getNativePodGroup(ctx, c, ns, "taken-pg")
	if err != nil || pg.Spec.SchedulingPolicy.Gang.MinCount != 7 || !pg.DeletionTimestamp.IsZero() || len(pg.OwnerReferences) != 1 {
		t.Errorf("the foreign PodGroup was touched: %+v, %v", pg, err)
	}
	if pods := testutil.ListPods(t, c, ns); len(pods) != 0 {
		t.Errorf("%d pods created beside a foreign PodGroup", len(pods))
	}
}

// nativeAllOrNothing runs the testbed's kube-scheduler with the gate (its
// default profile then has GangScheduling): a gang of a head and two
// 8-GPU workers, with room for only one worker, binds no pod, not even the
// head, which fits anywhere, where the same shape with scheduler default
// binds the head and one worker; once the room is there, all of it binds.
func nativeAllOrNothing(t *testing.T, api *testutil.APIServer) {
	c := api.Client
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	const product = "NVIDIA-GB200"
	taint := corev1.Taint{Key: "gpulab.io/native-gang-test", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	toleration := corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect}
	eight := corev1.ResourceList{gfd.GPUResource: quantity("8"), corev1.ResourceCPU: quantity("100"), corev1.ResourceMemory: quantity("1Ti"), corev1.ResourcePods: quantity("110")}
	for i := range 2 {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gb200-%d", i), Labels: map[string]string{gfd.Product: product, gfd.Memory: "189471"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{taint}},
		}
		if err := c.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		node.Status = corev1.NodeStatus{Capacity: eight, Allocatable: eight,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		if err := c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	// Bound by hand: it takes gb200-0's eight GPUs.
	filler := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "filler"},
		Spec: corev1.PodSpec{NodeName: "gb200-0", Tolerations: []corev1.Toleration{toleration}, Containers: []corev1.Container{{
			Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{gfd.GPUResource: quantity("8")}, Limits: corev1.ResourceList{gfd.GPUResource: quantity("8")}}}}},
	}
	if err := c.Create(ctx, filler); err != nil {
		t.Fatal(err)
	}

	// Play kube-controller-manager's node lifecycle controller: the
	// TaintNodesByCondition admission plugin gave every node the not-ready
	// taint, which only that controller removes.
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		kept := n.Spec.Taints[:0]
		for _, tt := range n.Spec.Taints {
			if tt.Key != corev1.TaintNodeNotReady {
				kept = append(kept, tt)
			}
		}
		n.Spec.Taints = kept
		if err := c.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}

	api.StartScheduler(t, local.NativeGangSchedulerArgs()...)

	// The first subtest's gang fits the H100 nodes: the scheduler binds it.
	testutil.Eventually(t, 2*waitTimeout, "kube-scheduler binds a gang that fits", func() (bool, string) {
		var list gpulabv1alpha1.GPUClusterList
		if err := c.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		for _, gc := range list.Items {
			if gc.Name != "native" {
				continue
			}
			cond := meta.FindStatusCondition(gc.Status.Conditions, gpulabv1alpha1.ConditionGangScheduled)
			ok := cond != nil && cond.Reason == gpulabv1alpha1.ReasonAllPodsBound && gc.Status.PodGroup != nil && gc.Status.PodGroup.Phase == "Scheduled"
			return ok, fmt.Sprintf("GangScheduled %s, podGroup %+v", conditionString(cond), gc.Status.PodGroup)
		}
		return false, "no cluster native"
	})

	shaped := func(name string, scheduler gpulabv1alpha1.SchedulerName) *gpulabv1alpha1.GPUCluster {
		gc := nativeCluster(ns, name, 2, 8)
		gc.Spec.Scheduling.Scheduler = scheduler
		gc.Spec.Head.Template.Spec.Tolerations = []corev1.Toleration{toleration}
		gc.Spec.WorkerGroups[0].GPUs.Product = product
		gc.Spec.WorkerGroups[0].Template.Spec.Tolerations = []corev1.Toleration{toleration}
		return gc
	}
	bound := func(cluster string) (n int, detail string) {
		var names []string
		for _, p := range testutil.ListPods(t, c, ns) {
			if p.Labels[gpulabv1alpha1.ClusterLabel] == cluster && p.Spec.NodeName != "" {
				n++
				names = append(names, p.Name+"→"+p.Spec.NodeName)
			}
		}
		return n, strings.Join(names, ", ")
	}

	// The contrast: the same shape without a gang is bound in part, the
	// head and the worker that fits.
	if err := c.Create(ctx, shaped("plain", gpulabv1alpha1.SchedulerDefault)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*waitTimeout, "the same shape without a gang bound in part", func() (bool, string) {
		n, detail := bound("plain")
		return n == 2, detail
	})
	_, detail := bound("plain")
	t.Logf("scheduler default, room for one worker: bound %s", detail)
	if err := c.Delete(ctx, &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range testutil.ListPods(t, c, ns) {
		if p.Labels[gpulabv1alpha1.ClusterLabel] == "plain" {
			// No garbage collector or kubelet runs here.
			if err := c.Delete(ctx, &p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}

	if err := c.Create(ctx, shaped("aon", gpulabv1alpha1.SchedulerKubernetes)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*waitTimeout, "kube-scheduler finds the gang unschedulable", func() (bool, string) {
		pg, err := getNativePodGroup(ctx, c, ns, "aon-pg")
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, k8sscheduling.PodGroupInitiallyScheduled)
		if cond != nil && cond.Status == metav1.ConditionFalse {
			t.Logf("scheduler kubernetes, room for one worker: PodGroup %s", conditionString(cond))
			return true, ""
		}
		return false, conditionString(cond)
	})
	time.Sleep(3 * time.Second) // time for a partial binding to show, were there one
	if n, detail := bound("aon"); n != 0 {
		t.Fatalf("%d pods of a gang with room for part of it were bound: %s", n, detail)
	}
	testutil.Eventually(t, waitTimeout, "status says Unschedulable", func() (bool, string) {
		st := testutil.GetCluster(t, c, ns, "aon").Status
		return st.PodGroup != nil && st.PodGroup.Phase == "Unschedulable" && st.Phase == gpulabv1alpha1.ClusterScheduling,
			fmt.Sprintf("phase %s, podGroup %+v", st.Phase, st.PodGroup)
	})

	if err := c.Delete(ctx, filler, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*waitTimeout, "the whole gang bound once it fits", func() (bool, string) {
		n, detail := bound("aon")
		return n == 3, detail
	})
	_, detail = bound("aon")
	t.Logf("scheduler kubernetes, room for the gang: bound %s", detail)
	testutil.Eventually(t, waitTimeout, "status says the gang is bound", func() (bool, string) {
		st := testutil.GetCluster(t, c, ns, "aon").Status
		cond := meta.FindStatusCondition(st.Conditions, gpulabv1alpha1.ConditionGangScheduled)
		return cond != nil && cond.Reason == gpulabv1alpha1.ReasonAllPodsBound && st.ScheduledTime != nil && st.PodGroup.Phase == "Scheduled",
			fmt.Sprintf("GangScheduled %s, podGroup %+v", conditionString(cond), st.PodGroup)
	})
}
