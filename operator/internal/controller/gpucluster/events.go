package gpucluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sscheduling "k8s.io/api/scheduling/v1beta1"
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

// childEventBatch is how long a child's change that may turn its gang's
// verdict waits before it wakes its cluster, so that the pods of a gang,
// started together, cost one reconcile, not one each. It adds at most
// this much to any phase.
const childEventBatch = 100 * time.Millisecond

// turnPriority is the queue priority of a child's change that may turn
// its gang's verdict: under load the queue holds the creation work of
// every new gang, and a gang that is already up should not wait behind
// it to be reported Ready. Other changes keep the default, 0.
const turnPriority = 10

// ownerHandler enqueues a child's controlling GPUCluster. A deletion, and
// an update for which turns (nil: never) says it may turn the gang's
// verdict, go ahead of other work, a deletion at once and an update after
// childEventBatch. A creation, or an update that is progress only (a pod
// bound, or Ready before the rest of its gang), waits coalesce, the status
// coalescing window, in turn with other work: the gang's progress is then
// one reconcile, and under load, where the queue is long, often one with
// its Ready. Creations are almost always this controller's own: the
// reconcile after them confirms the gang's children all exist (and heals
// one that does not) and writes the deferred first status. Further
// events inside a wait join the same reconcile.
func ownerHandler(scheme *runtime.Scheme, mapper meta.RESTMapper, coalesce time.Duration, turns func(context.Context, event.UpdateEvent) bool) handler.EventHandler {
	return batched{inner: handler.EnqueueRequestForOwner(scheme, mapper, &gpulabv1alpha1.GPUCluster{}, handler.OnlyControllerOwner()),
		coalesce: coalesce, turns: turns}
}

type batched struct {
	inner    handler.EventHandler
	coalesce time.Duration
	turns    func(context.Context, event.UpdateEvent) bool
}

func (b batched) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	b.inner.Create(ctx, e, delayed{q, b.coalesce, 0})
}

func (b batched) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if b.turns != nil && b.turns(ctx, e) {
		b.inner.Update(ctx, e, delayed{q, childEventBatch, turnPriority})
		return
	}
	b.inner.Update(ctx, e, delayed{q, b.coalesce, 0})
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
// phase, readiness lost, deletion, or what ties it to its spec and group;
// a pod turning Ready only when it makes the gang whole, so that under
// load the gang's earlier pods wait their turn with its other progress and
// their changes are one reconcile, while the last one is not reported late.
func (r *Reconciler) podTurned(ctx context.Context, e event.UpdateEvent) bool {
	was, ok1 := e.ObjectOld.(*corev1.Pod)
	now, ok2 := e.ObjectNew.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	if !podReady(was) && runningReady(now) {
		return r.gangWhole(ctx, now)
	}
	return podVerdictChanged(was, now)
}

// gangWhole says whether every pod the controlling cluster of pod wants is
// Running and Ready, as the cache has them (the informer stores a change
// before its handlers see it). A wrong answer moves only when the
// reconcile comes, never what it does.
func (r *Reconciler) gangWhole(ctx context.Context, pod *corev1.Pod) bool {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "GPUCluster" {
		return false
	}
	cluster := &gpulabv1alpha1.GPUCluster{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, cluster); err != nil || cluster.UID != owner.UID {
		return false
	}
	want := 1
	for _, g := range cluster.Spec.WorkerGroups {
		want += int(g.Replicas)
	}
	pods, err := r.listPods(ctx, cluster)
	if err != nil {
		return false
	}
	ready := 0
	for i := range pods {
		if pods[i].DeletionTimestamp.IsZero() && runningReady(&pods[i]) {
			ready++
		}
	}
	return ready >= want
}

// podGroupTurned says whether a PodGroup's update may turn its gang's
// verdict: every change podGroupChanged passes but the phase moving on
// towards Running (Pending, Inqueue, Running), which is progress.
func podGroupTurned(_ context.Context, e event.UpdateEvent) bool {
	was, ok1 := e.ObjectOld.(*schedulingv1beta1.PodGroup)
	now, ok2 := e.ObjectNew.(*schedulingv1beta1.PodGroup)
	if !ok1 || !ok2 || podGroupSpecChanged(was, now) {
		return true
	}
	return was.Status.Phase != now.Status.Phase && podGroupProgress[was.Status.Phase] >= podGroupProgress[now.Status.Phase]
}

// podGroupProgress orders the phases a healthy gang goes through; any
// other phase is 0, so reaching it from one of these turns the verdict.
var podGroupProgress = map[schedulingv1beta1.PodGroupPhase]int{
	schedulingv1beta1.PodGroupPending: 1, schedulingv1beta1.PodGroupInqueue: 2, schedulingv1beta1.PodGroupRunning: 3,
}

// podChanged passes creations, deletions and the pod updates that can
// change what the cluster does or reports: binding, and what
// podVerdictChanged checks. Other writes (kubelet's status details, IPs)
// do not wake the cluster.
var podChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		was, ok1 := e.ObjectOld.(*corev1.Pod)
		now, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return was.Spec.NodeName != now.Spec.NodeName || podVerdictChanged(was, now)
	},
}

// podVerdictChanged says whether the pod's phase, readiness or deletion
// changed, or what ties it to its spec and group.
func podVerdictChanged(was, now *corev1.Pod) bool {
	return was.Status.Phase != now.Status.Phase ||
		podReady(was) != podReady(now) || was.DeletionTimestamp.IsZero() != now.DeletionTimestamp.IsZero() ||
		was.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] != now.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] ||
		was.Labels[gpulabv1alpha1.GroupLabel] != now.Labels[gpulabv1alpha1.GroupLabel] ||
		!sameController(was, now)
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
		return was.Status.Phase != now.Status.Phase || podGroupSpecChanged(was, now)
	},
}

// podGroupSpecChanged says whether the PodGroup's spec, deletion or
// controller changed.
func podGroupSpecChanged(was, now *schedulingv1beta1.PodGroup) bool {
	return was.Generation != now.Generation || was.DeletionTimestamp.IsZero() != now.DeletionTimestamp.IsZero() || !sameController(was, now)
}

// nativePodGroupChanged passes scheduling.k8s.io PodGroup updates that
// change its spec, deletion or controller, or kube-scheduler's verdict on
// it (its PodGroupInitiallyScheduled condition).
var nativePodGroupChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		was, ok1 := e.ObjectOld.(*k8sscheduling.PodGroup)
		now, ok2 := e.ObjectNew.(*k8sscheduling.PodGroup)
		if !ok1 || !ok2 {
			return true
		}
		return nativePodGroupSpecChanged(was, now) || nativeVerdict(was) != nativeVerdict(now)
	},
}

// nativePodGroupTurned says whether a scheduling.k8s.io PodGroup's update
// may turn its gang's verdict: every change nativePodGroupChanged passes
// but the gang being placed, which is progress.
func nativePodGroupTurned(_ context.Context, e event.UpdateEvent) bool {
	was, ok1 := e.ObjectOld.(*k8sscheduling.PodGroup)
	now, ok2 := e.ObjectNew.(*k8sscheduling.PodGroup)
	if !ok1 || !ok2 || nativePodGroupSpecChanged(was, now) {
		return true
	}
	return nativeVerdict(was) != nativeVerdict(now) && nativeVerdict(now) != string(metav1.ConditionTrue)
}

func nativePodGroupSpecChanged(was, now *k8sscheduling.PodGroup) bool {
	return was.Generation != now.Generation || was.DeletionTimestamp.IsZero() != now.DeletionTimestamp.IsZero() || !sameController(was, now)
}

// nativeVerdict is kube-scheduler's verdict on a PodGroup: its
// PodGroupInitiallyScheduled condition's status and reason.
func nativeVerdict(pg *k8sscheduling.PodGroup) string {
	c := meta.FindStatusCondition(pg.Status.Conditions, k8sscheduling.PodGroupInitiallyScheduled)
	if c == nil {
		return ""
	}
	if c.Status == metav1.ConditionTrue {
		return string(c.Status)
	}
	return string(c.Status) + "/" + c.Reason
}

func sameController(a, b client.Object) bool {
	ca, cb := metav1.GetControllerOf(a), metav1.GetControllerOf(b)
	return (ca == nil) == (cb == nil) && (ca == nil || ca.UID == cb.UID)
}
