package gpucluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// childEventBatch is how long a child's change waits before it wakes its
// cluster, so that the pods of a gang, bound and started together, cost
// one reconcile, not one each. It adds at most this much to any phase.
const childEventBatch = 100 * time.Millisecond

// turnPriority is the queue priority of a child's change that may turn
// its gang's verdict (a pod Ready, failed or deleted, the PodGroup's
// phase): under load the queue holds the creation work of every new
// gang, and a gang that is already up should not wait behind it to be
// reported Ready. Other changes keep the default, 0.
const turnPriority = 10

// ownerHandler enqueues a child's controlling GPUCluster: at once for a
// deletion, after childEventBatch for an update (further events inside the
// window join the same reconcile), and after created for a creation.
// Creations are almost always this controller's own: nothing waits on the
// reconcile after them, which confirms the gang's children all exist (and
// heals one that does not), so it waits as long as a new cluster's first
// status write and the two are one reconcile. Deletions, and the updates
// turns says may turn the verdict (nil: none), go ahead of other work.
func ownerHandler(scheme *runtime.Scheme, mapper meta.RESTMapper, created time.Duration, turns func(event.UpdateEvent) bool) handler.EventHandler {
	return batched{inner: handler.EnqueueRequestForOwner(scheme, mapper, &gpulabv1alpha1.GPUCluster{}, handler.OnlyControllerOwner()),
		created: created, turns: turns}
}

type batched struct {
	inner   handler.EventHandler
	created time.Duration
	turns   func(event.UpdateEvent) bool
}

func (b batched) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	b.inner.Create(ctx, e, delayed{q, b.created, 0})
}

func (b batched) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	priority := 0
	if b.turns != nil && b.turns(e) {
		priority = turnPriority
	}
	b.inner.Update(ctx, e, delayed{q, childEventBatch, priority})
}

func (b batched) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	b.inner.Delete(ctx, e, delayed{q, 0, turnPriority})
}

func (b batched) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	b.inner.Generic(ctx, e, q)
}

// delayed turns Add into an add after by at priority (where the queue
// has priorities, as controller-runtime's default queue does); the queue
// keeps one entry per key, with the shortest wait and highest priority
// asked, so a burst of changes is one reconcile.
type delayed struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	by       time.Duration
	priority int
}

func (q delayed) Add(r reconcile.Request) {
	if pq, ok := q.TypedRateLimitingInterface.(priorityqueue.PriorityQueue[reconcile.Request]); ok && q.priority != 0 {
		pq.AddWithOpts(priorityqueue.AddOpts{After: q.by, Priority: &q.priority}, r)
		return
	}
	if q.by == 0 {
		q.TypedRateLimitingInterface.Add(r)
		return
	}
	q.AddAfter(r, q.by)
}

// podTurned says whether a pod's update may turn its gang's verdict: its
// readiness or phase changed, or its deletion began.
func podTurned(e event.UpdateEvent) bool {
	was, ok1 := e.ObjectOld.(*corev1.Pod)
	now, ok2 := e.ObjectNew.(*corev1.Pod)
	return ok1 && ok2 && (podReady(was) != podReady(now) || was.Status.Phase != now.Status.Phase ||
		was.DeletionTimestamp.IsZero() != now.DeletionTimestamp.IsZero())
}

// podGroupTurned says whether a PodGroup's phase changed.
func podGroupTurned(e event.UpdateEvent) bool {
	was, ok1 := e.ObjectOld.(*schedulingv1beta1.PodGroup)
	now, ok2 := e.ObjectNew.(*schedulingv1beta1.PodGroup)
	return ok1 && ok2 && was.Status.Phase != now.Status.Phase
}

// podChanged passes creations, deletions and the pod updates that can
// change what the cluster does or reports: binding, phase, readiness,
// deletion, and what ties the pod to its spec and group. Other writes
// (kubelet's status details, IPs) do not wake the cluster.
var podChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		was, ok1 := e.ObjectOld.(*corev1.Pod)
		now, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return was.Spec.NodeName != now.Spec.NodeName || was.Status.Phase != now.Status.Phase ||
			podReady(was) != podReady(now) || was.DeletionTimestamp.IsZero() != now.DeletionTimestamp.IsZero() ||
			was.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] != now.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] ||
			was.Labels[gpulabv1alpha1.GroupLabel] != now.Labels[gpulabv1alpha1.GroupLabel] ||
			!sameController(was, now)
	},
}

// podGroupChanged passes PodGroup updates that change its phase or spec
// (Volcano's running/succeeded counters alone do not matter here).
var podGroupChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		was, ok1 := e.ObjectOld.(*schedulingv1beta1.PodGroup)
		now, ok2 := e.ObjectNew.(*schedulingv1beta1.PodGroup)
		if !ok1 || !ok2 {
			return true
		}
		return was.Status.Phase != now.Status.Phase || was.Generation != now.Generation ||
			was.DeletionTimestamp.IsZero() != now.DeletionTimestamp.IsZero() || !sameController(was, now)
	},
}

func sameController(a, b client.Object) bool {
	ca, cb := metav1.GetControllerOf(a), metav1.GetControllerOf(b)
	return (ca == nil) == (cb == nil) && (ca == nil || ca.UID == cb.UID)
}
