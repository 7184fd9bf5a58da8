package gpucluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/poll"
)

// recordingQueue records how long each Add waits.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	waits []time.Duration
}

func (q *recordingQueue) Add(reconcile.Request) { q.waits = append(q.waits, 0) }
func (q *recordingQueue) AddAfter(_ reconcile.Request, d time.Duration) {
	q.waits = append(q.waits, d)
}

// TestChildWaits: a child's creation, and a pod's binding (progress
// only), wake the cluster after the status coalescing window, so the
// reconcile after the cluster's own creates is the one that writes its
// deferred first status, and a gang that comes up within the window costs
// one reconcile; a change that may turn the verdict wakes it after the
// short batch, a deletion at once.
func TestChildWaits(t *testing.T) {
	pod := ownedPod("c")
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "node-1"
	ready := bound.DeepCopy()
	ready.Status.Phase = corev1.PodRunning
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}

	const window = 1500 * time.Millisecond
	h := testOwnerHandler(t, window)
	q := &recordingQueue{}
	ctx := context.Background()
	h.Create(ctx, event.CreateEvent{Object: pod}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod, ObjectNew: bound}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: bound, ObjectNew: ready}, q)
	h.Delete(ctx, event.DeleteEvent{Object: pod}, q)
	want := []time.Duration{window, window, childEventBatch, 0}
	if fmt.Sprint(q.waits) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v (create, bind, Ready, delete)", q.waits, want)
	}
}

// A PodGroup moving on towards Running is progress; leaving Running, or
// a change to its spec or controller, may turn the verdict.
func TestPodGroupTurned(t *testing.T) {
	pg := func(phase schedulingv1beta1.PodGroupPhase, generation int64) *schedulingv1beta1.PodGroup {
		return &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Generation: generation}, Status: schedulingv1beta1.PodGroupStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		was, now *schedulingv1beta1.PodGroup
		turned   bool
	}{
		{pg(schedulingv1beta1.PodGroupPending, 1), pg(schedulingv1beta1.PodGroupInqueue, 1), false},
		{pg(schedulingv1beta1.PodGroupInqueue, 1), pg(schedulingv1beta1.PodGroupRunning, 1), false},
		{pg("", 1), pg(schedulingv1beta1.PodGroupPending, 1), false},
		{pg(schedulingv1beta1.PodGroupRunning, 1), pg(schedulingv1beta1.PodGroupPending, 1), true},
		{pg(schedulingv1beta1.PodGroupRunning, 1), pg(schedulingv1beta1.PodGroupUnknown, 1), true},
		{pg(schedulingv1beta1.PodGroupInqueue, 1), pg(schedulingv1beta1.PodGroupInqueue, 2), true},
	} {
		if got := podGroupTurned(context.Background(), event.UpdateEvent{ObjectOld: tc.was, ObjectNew: tc.now}); got != tc.turned {
			t.Errorf("%q (generation %d) -> %q (generation %d): turned %v, want %v",
				tc.was.Status.Phase, tc.was.Generation, tc.now.Status.Phase, tc.now.Generation, got, tc.turned)
		}
	}
}

// testOwnerHandler is the pods' handler with readyTurns.
func testOwnerHandler(t *testing.T, coalesce time.Duration) handler.EventHandler {
	t.Helper()
	scheme := k8sruntime.NewScheme()
	if err := gpulabv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(gpulabv1alpha1.GroupVersion.WithKind("GPUCluster"), meta.RESTScopeNamespace)
	return ownerHandler(scheme, mapper, coalesce, readyTurns)
}

// readyTurns stands in for podTurned (whose gang check reads the API, see
// turned_test.go): a pod Ready turns the verdict.
func readyTurns(_ context.Context, e event.UpdateEvent) bool {
	return podReady(e.ObjectNew.(*corev1.Pod))
}

// ownedPod is a pod of cluster name, controlled by it.
func ownedPod(name string) *corev1.Pod {
	truth := true
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-head", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: gpulabv1alpha1.GroupVersion.String(), Kind: "GPUCluster", Name: name, UID: "u-" + types.UID(name), Controller: &truth}}}}
}

// TestTurningChangesGoFirst: on controller-runtime's priority queue, a
// change that turns a gang's verdict (here a pod turning Ready), or a
// deletion, wakes its cluster ahead of work queued before it (new
// clusters' creations), while a pod only binding waits its turn.
func TestTurningChangesGoFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("turning-test")
	defer q.ShutDown()
	h := testOwnerHandler(t, time.Second)
	ctx := context.Background()
	for _, name := range []string{"new-1", "new-2"} {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
	}
	bound, ready, deleted := ownedPod("binding"), ownedPod("ready"), ownedPod("deleted")
	nowBound := bound.DeepCopy()
	nowBound.Spec.NodeName = "node-1"
	nowReady := ready.DeepCopy()
	nowReady.Status.Phase = corev1.PodRunning
	nowReady.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	h.Update(ctx, event.UpdateEvent{ObjectOld: bound, ObjectNew: nowBound}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: ready, ObjectNew: nowReady}, q)
	h.Delete(ctx, event.DeleteEvent{Object: deleted}, q)

	// The updates are batched for childEventBatch: once all five are
	// ready, the order is the queue's, not the clock's.
	if err := poll.Until(ctx, 10*time.Second, func() (bool, string) {
		return q.Len() == 5, fmt.Sprintf("%d of 5 ready", q.Len())
	}); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 5 {
		r, _ := q.Get()
		q.Done(r)
		order = append(order, r.Name)
	}
	want := []string{"deleted", "ready", "new-1", "new-2", "binding"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("reconciled %v, want %v", order, want)
	}
}
