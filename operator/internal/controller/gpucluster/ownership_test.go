package gpucluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// conflictTimeout covers the operator's recheck of a blocked cluster (15 s)
// twice over.
const conflictTimeout = 45 * time.Second

// foreignOwner creates a ConfigMap to stand for another controller (another
// GPUCluster, a RayCluster) and returns a controller reference to it.
func foreignOwner(t *testing.T, c client.Client, ns, name string) []metav1.OwnerReference {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	yes := true
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: cm.UID, Controller: &yes}}
}

// waitReadyReason waits until the cluster's Ready condition has reason and a
// message containing every part.
func waitReadyReason(t *testing.T, c client.Client, ns, name, reason string, parts ...string) *gpulabv1alpha1.GPUCluster {
	t.Helper()
	var gc *gpulabv1alpha1.GPUCluster
	testutil.Eventually(t, conflictTimeout, "Ready condition "+reason, func() (bool, string) {
		gc = testutil.GetCluster(t, c, ns, name)
		cond := meta.FindStatusCondition(gc.Status.Conditions, gpulabv1alpha1.ConditionReady)
		if cond == nil || cond.Reason != reason {
			return false, "phase " + string(gc.Status.Phase) + ", Ready " + conditionString(cond)
		}
		for _, p := range parts {
			if !strings.Contains(cond.Message, p) {
				return false, "Ready " + conditionString(cond) + "; want message with " + p
			}
		}
		return true, ""
	})
	return gc
}

func conditionString(c *metav1.Condition) string {
	if c == nil {
		return "absent"
	}
	return string(c.Status) + "/" + c.Reason + ": " + c.Message
}

func expectEvent(t *testing.T, c client.Client, ns, reason, part string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, "a "+reason+" event", func() (bool, string) {
		var events eventsv1.EventList
		if err := c.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Note, part) {
				return true, ""
			}
		}
		return false, "no such event yet"
	})
}

// TestForeignChildrenAreLeftAlone pre-creates objects under the names a
// cluster's Service and pod want, controlled by someone else (or nobody):
// the cluster never adopts, updates or deletes them, fails with NameConflict
// naming the holder, and recovers once each goes away.
func TestForeignChildrenAreLeftAlone(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own-head"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "theirs"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	// The pod another cluster would have made: our label, their controller.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own-workers-0", OwnerReferences: foreignOwner(t, c, ns, "other"),
			Labels: map[string]string{gpulabv1alpha1.ClusterLabel: "own"}},
		Spec: testutil.PodTemplate("other", nil).Spec,
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, testutil.NewCluster(ns, "own", 2, 4)); err != nil {
		t.Fatal(err)
	}

	gc := waitReadyReason(t, c, ns, "own", gpulabv1alpha1.ReasonNameConflict, "Service own-head", "no controller")
	if gc.Status.Phase != gpulabv1alpha1.ClusterFailed {
		t.Errorf("phase = %s with a name conflict, want Failed", gc.Status.Phase)
	}
	if cond := meta.FindStatusCondition(gc.Status.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded); cond == nil || cond.Reason != gpulabv1alpha1.ReasonNameConflict {
		t.Errorf("ReconcileSucceeded = %s, want False/NameConflict", conditionString(cond))
	}
	expectEvent(t, c, ns, gpulabv1alpha1.ReasonNameConflict, "Service own-head")
	got := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Selector["app"] != "theirs" || len(got.OwnerReferences) != 0 {
		t.Errorf("the foreign Service was changed: selector %v, owners %v", got.Spec.Selector, got.OwnerReferences)
	}

	if err := c.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitReadyReason(t, c, ns, "own", gpulabv1alpha1.ReasonNameConflict, "Pod own-workers-0", "ConfigMap other")
	expectEvent(t, c, ns, gpulabv1alpha1.ReasonNameConflict, "Pod own-workers-0")
	expectUntouched(t, c, pod)

	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, conflictTimeout, "the cluster to recover with its own pods", func() (bool, string) {
		gc := testutil.GetCluster(t, c, ns, "own")
		cond := meta.FindStatusCondition(gc.Status.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded)
		if cond == nil || cond.Status != metav1.ConditionTrue || gc.Status.Phase == gpulabv1alpha1.ClusterFailed {
			return false, "phase " + string(gc.Status.Phase) + ", ReconcileSucceeded " + conditionString(cond)
		}
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "own-workers-0"}, p); err != nil {
			return false, err.Error()
		}
		return metav1.IsControlledBy(p, gc), "own-workers-0 is not controlled by the cluster"
	})
}

// TestForeignPodGroupIsLeftAlone pre-creates the PodGroup name a cluster
// wants (as KubeRay's ray-<name>-pg can), controlled by another object: the
// cluster never resizes it, never creates pods into it, and a suspend does
// not delete it.
func TestForeignPodGroupIsLeftAlone(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})

	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ray-pg", OwnerReferences: foreignOwner(t, c, ns, "raycluster")},
		Spec:       schedulingv1beta1.PodGroupSpec{MinMember: 1, Queue: "default"},
	}
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, testutil.NewCluster(ns, "ray", 2, 4)); err != nil {
		t.Fatal(err)
	}
	waitReadyReason(t, c, ns, "ray", gpulabv1alpha1.ReasonNameConflict, "PodGroup ray-pg", "ConfigMap raycluster")
	for _, p := range testutil.ListPods(t, c, ns) {
		t.Errorf("pod %s created into a PodGroup the cluster does not control", p.Name)
	}

	gc := testutil.GetCluster(t, c, ns, "ray")
	gc.Spec.Suspend = true
	if err := c.Update(ctx, gc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, conflictTimeout, "the suspended cluster to report the conflict", func() (bool, string) {
		gc := testutil.GetCluster(t, c, ns, "ray")
		cond := meta.FindStatusCondition(gc.Status.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded)
		return gc.Status.ObservedGeneration == gc.Generation && cond != nil && cond.Reason == gpulabv1alpha1.ReasonNameConflict,
			"ReconcileSucceeded " + conditionString(cond)
	})
	expectUntouched(t, c, pg)
	got := &schedulingv1beta1.PodGroup{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pg), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.MinMember != 1 {
		t.Errorf("the foreign PodGroup was resized: minMember %d", got.Spec.MinMember)
	}
}

// expectUntouched checks obj still exists as created: same UID, same
// owners, not being deleted.
func expectUntouched(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	uid, owners := obj.GetUID(), obj.GetOwnerReferences()
	got := obj.DeepCopyObject().(client.Object)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatalf("the foreign %s is gone: %v", obj.GetName(), err)
	}
	if got.GetUID() != uid || got.GetDeletionTimestamp() != nil {
		t.Errorf("the foreign %s was deleted (uid %s→%s, deleting %v)", obj.GetName(), uid, got.GetUID(), got.GetDeletionTimestamp())
	}
	if len(got.GetOwnerReferences()) != len(owners) || (len(owners) > 0 && got.GetOwnerReferences()[0].UID != owners[0].UID) {
		t.Errorf("the foreign %s was adopted: owners %v", obj.GetName(), got.GetOwnerReferences())
	}
}

// TestGPUContainerMustExist: gpus.container naming no container of the
// template fails the cluster with InvalidSpec and creates nothing (the GPUs
// are never put on another container); renaming the container fixes it.
func TestGPUContainerMustExist(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	gc := testutil.NewCluster(ns, "typo", 1, 4)
	gc.Spec.WorkerGroups[0].GPUs.Container = "trainer"
	if err := c.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	got := waitReadyReason(t, c, ns, "typo", gpulabv1alpha1.ReasonInvalidSpec, `gpus.container "trainer"`, "containers: worker")
	if got.Status.Phase != gpulabv1alpha1.ClusterFailed {
		t.Errorf("phase %s, want Failed", got.Status.Phase)
	}
	expectEvent(t, c, ns, gpulabv1alpha1.ReasonInvalidSpec, "trainer")
	for _, p := range testutil.ListPods(t, c, ns) {
		t.Errorf("pod %s created from an invalid spec", p.Name)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gc := testutil.GetCluster(t, c, ns, "typo")
		gc.Spec.WorkerGroups[0].Template.Spec.Containers[0].Name = "trainer"
		return c.Update(ctx, gc)
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the worker with its GPUs on container trainer", func() (bool, string) {
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "typo-workers-0"}, p); err != nil {
			return false, err.Error()
		}
		q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		return p.Spec.Containers[0].Name == "trainer" && q.Value() == 4, "GPUs not on trainer"
	})
}

// TestRecreatedUnderTheSameNameWaits: a GPUCluster deleted and created again
// under its name finds its children still held by the deleted one until the
// garbage collector removes them. That is a replacement, not a conflict:
// Pending with reason Replacing and no Warning, then the gang is built.
func TestRecreatedUnderTheSameNameWaits(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	ns := testutil.NewNamespace(t, c)
	first := testutil.NewCluster(ns, "again", 1, 1)
	if err := c.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the first cluster's pods", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 2, fmt.Sprintf("%d pods", n)
	})
	if err := c.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the first cluster gone", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(first), &gpulabv1alpha1.GPUCluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// The API server here runs no garbage collector: the old pods stay
	// until this test removes them, as the collector would.
	second := testutil.NewCluster(ns, "again", 1, 1)
	if err := c.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	gc := waitReadyReason(t, c, ns, "again", gpulabv1alpha1.ReasonReplacing, "previous GPUCluster.gpulab.io again")
	if gc.Status.Phase != gpulabv1alpha1.ClusterPending {
		t.Errorf("phase %s while the old children go, want Pending", gc.Status.Phase)
	}
	var events eventsv1.EventList
	if err := c.List(ctx, &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Regarding.UID == second.UID && e.Type == corev1.EventTypeWarning {
			t.Errorf("a Warning while the old children go: %s %s", e.Reason, e.Note)
		}
	}
	collect := func(obj client.Object) {
		if err := c.DeleteAllOf(ctx, obj, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	collect(&corev1.Pod{})
	collect(&schedulingv1beta1.PodGroup{})
	var services corev1.ServiceList
	if err := c.List(ctx, &services, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range services.Items { // Services have no deletecollection
		if err := c.Delete(ctx, &services.Items[i]); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, waitTimeout, "the new cluster's own pods", func() (bool, string) {
		pods := testutil.ListPods(t, c, ns)
		for _, p := range pods {
			if ref := metav1.GetControllerOf(&p); ref == nil || ref.UID != second.UID {
				return false, p.Name + " not controlled by the new cluster"
			}
		}
		return len(pods) == 2, fmt.Sprintf("%d pods", len(pods))
	})
}
