package gpucluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/scheduler"
)

// updateStatus writes the status computed from this reconcile's
// observations, only when it changed. On a conflict it re-reads the cluster
// from the API server and recomputes on top of what is there (keeping the
// first-seen timestamps), never overwriting blindly.
func (r *Reconciler) updateStatus(ctx context.Context, s *scope) error {
	key := client.ObjectKeyFromObject(s.cluster)
	old := s.cluster.Status.DeepCopy()
	next := computeStatus(s, r.seeded(key, old), metav1.Now())
	if equality.Semantic.DeepEqual(*old, next) {
		r.metrics.SetPhase(key, string(next.Phase))
		return nil
	}
	progress := !urgent(old, &next)
	if !progress && starting(old, &next) {
		// A new cluster's first status waits too, FirstStatusDelay from
		// when it was first seen: a gang Ready within it costs one write.
		r.statusHeld.LoadOrStore(key, time.Now().Add(r.opts.FirstStatusDelay))
		progress = true
	}
	if progress {
		if until, ok := r.statusHeld.Load(key); ok {
			if wait := time.Until(until.(time.Time)); wait > 0 {
				// The first-seen times are kept for the write that comes.
				r.pendingScheduled.Store(key, next.ScheduledTime)
				s.statusDeferred = wait
				return nil
			}
		}
	}
	updated := s.cluster.DeepCopy()
	updated.Status = next
	err := r.client.Status().Update(ctx, updated)
	if apierrors.IsConflict(err) {
		fresh := &gpulabv1alpha1.GPUCluster{}
		if getErr := r.apiReader.Get(ctx, key, fresh); getErr != nil {
			if apierrors.IsNotFound(getErr) {
				return nil // deleted since it was read, as below
			}
			return errors.Join(err, getErr)
		}
		if fresh.Generation != s.cluster.Generation {
			// The spec moved on; the next reconcile sees it.
			return fmt.Errorf("status write raced a spec change: %w", err)
		}
		old = fresh.Status.DeepCopy()
		next = computeStatus(s, r.seeded(key, old), metav1.Now())
		fresh.Status = next
		updated = fresh
		err = r.client.Status().Update(ctx, updated)
	}
	if apierrors.IsNotFound(err) {
		// Deleted since it was read: there is no one left to tell, and
		// its deletion wakes the reconcile that forgets it.
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	r.statusHeld.Store(key, time.Now().Add(r.opts.StatusCoalesce))
	r.pendingScheduled.Delete(key)
	r.recordTransitions(s.cluster, old, &next)
	return nil
}

// seeded is old with the scheduled time a deferred write observed, so the
// write that finally goes out says when the gang was first seen bound, not
// when the write happened.
func (r *Reconciler) seeded(key client.ObjectKey, old *gpulabv1alpha1.GPUClusterStatus) *gpulabv1alpha1.GPUClusterStatus {
	pending, ok := r.pendingScheduled.Load(key)
	if !ok || old.ScheduledTime != nil || pending.(*metav1.Time) == nil {
		return old
	}
	seed := old.DeepCopy()
	seed.ScheduledTime = pending.(*metav1.Time).DeepCopy()
	return seed
}

// DefaultStatusCoalesce is how long after a status write a progress
// change waits, so that a gang's pods binding and starting one by one cost
// one write, not one each: pod counts, the PodGroup's phase, messages,
// the GangScheduled and HeadReady steps, and the step from Scheduling to
// Provisioning (all bound, not yet Ready), whose first-seen time is kept
// meanwhile. A new cluster's first status, while it is on its way, waits
// DefaultFirstStatusDelay from when the cluster was first seen. Every other phase change,
// Ready among them, and the other condition verdicts are written at once:
// they are what users, alerts and the latency measurements wait for.
const DefaultStatusCoalesce = time.Second

// DefaultFirstStatusDelay is how long a new cluster's first status waits
// while all it says is that the gang is on its way. Most gangs are Ready
// sooner, even in a burst of three hundred on two cores, so their first
// status write is the one that says Ready; a verdict (cannot fit,
// invalid, waiting for nodes, an error) is written at once, and kubectl
// shows a cluster without a phase for at most this long. At 10 s, half of
// such a burst wrote a status in the middle of its binding.
const DefaultFirstStatusDelay = 30 * time.Second

// progressConditions change as a healthy gang comes up; the Ready
// condition and the phase carry the verdict.
var progressConditions = []string{gpulabv1alpha1.ConditionGangScheduled, gpulabv1alpha1.ConditionHeadReady}

// urgent says whether next differs from old in more than progress.
func urgent(old, next *gpulabv1alpha1.GPUClusterStatus) bool {
	if (old.Phase != next.Phase && next.Phase != gpulabv1alpha1.ClusterProvisioning) || old.ObservedGeneration != next.ObservedGeneration ||
		(old.ReadyTime == nil) != (next.ReadyTime == nil) || (old.ScheduledTime != nil && next.ScheduledTime == nil) ||
		old.DesiredPods != next.DesiredPods || old.GPUs != next.GPUs || len(old.Conditions) != len(next.Conditions) {
		return true
	}
	for _, c := range next.Conditions {
		was := meta.FindStatusCondition(old.Conditions, c.Type)
		if was == nil || ((was.Status != c.Status || was.Reason != c.Reason) && !slices.Contains(progressConditions, c.Type)) {
			return true
		}
	}
	return false
}

// starting says next is a new cluster's first status and says only that
// it is on its way: it fits, its reconcile succeeded, and its pods are
// pending or binding. Anything else a first status says (cannot fit,
// invalid, Volcano missing, an error) is a verdict, written at once.
func starting(old, next *gpulabv1alpha1.GPUClusterStatus) bool {
	if old.ObservedGeneration != 0 || len(old.Conditions) != 0 {
		return false
	}
	switch next.Phase {
	case gpulabv1alpha1.ClusterPending, gpulabv1alpha1.ClusterScheduling, gpulabv1alpha1.ClusterProvisioning:
	default:
		return false
	}
	if !meta.IsStatusConditionTrue(next.Conditions, gpulabv1alpha1.ConditionSchedulable) ||
		!meta.IsStatusConditionTrue(next.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded) {
		return false
	}
	gang := meta.FindStatusCondition(next.Conditions, gpulabv1alpha1.ConditionGangScheduled)
	return gang == nil || gang.Reason == gpulabv1alpha1.ReasonPodsPending || gang.Reason == gpulabv1alpha1.ReasonAllPodsBound
}

// recordTransitions updates metrics and events on changes only.
func (r *Reconciler) recordTransitions(cluster *gpulabv1alpha1.GPUCluster, old, next *gpulabv1alpha1.GPUClusterStatus) {
	created := cluster.CreationTimestamp.Time
	if old.ScheduledTime == nil && next.ScheduledTime != nil {
		r.metrics.ObserveBound(next.ScheduledTime.Sub(created))
	}
	if old.ReadyTime == nil && next.ReadyTime != nil {
		r.metrics.ObserveReady(next.ReadyTime.Sub(created))
	}
	r.metrics.SetPhase(client.ObjectKeyFromObject(cluster), string(next.Phase))
	wasReady := meta.FindStatusCondition(old.Conditions, gpulabv1alpha1.ConditionReady)
	if ready := meta.FindStatusCondition(next.Conditions, gpulabv1alpha1.ConditionReady); ready != nil &&
		(ready.Reason == gpulabv1alpha1.ReasonNameConflict || ready.Reason == gpulabv1alpha1.ReasonInvalidSpec) &&
		(wasReady == nil || wasReady.Reason != ready.Reason || wasReady.Message != ready.Message) {
		r.events.Eventf(cluster, nil, corev1.EventTypeWarning, ready.Reason, "Validate", "%s", ready.Message)
	}
	was := meta.FindStatusCondition(old.Conditions, gpulabv1alpha1.ConditionSchedulable)
	now := meta.FindStatusCondition(next.Conditions, gpulabv1alpha1.ConditionSchedulable)
	if now != nil && now.Status == metav1.ConditionFalse && (was == nil || was.Status != metav1.ConditionFalse || was.Reason != now.Reason) {
		if now.Reason == gpulabv1alpha1.ReasonWaitingForNodes {
			// Not a failure: the autoscaler is expected to act.
			r.events.Eventf(cluster, nil, corev1.EventTypeNormal, now.Reason, "CheckCapacity", "%s", now.Message)
		} else {
			r.metrics.Unschedulable(now.Reason)
			r.events.Eventf(cluster, nil, corev1.EventTypeWarning, now.Reason, "CheckCapacity", "%s", now.Message)
		}
	}
}

// podCounts are the observations status is computed from.
type podCounts struct {
	existing, bound, ready int32
	headReady              bool
	readyByGroup           map[string]int32
}

func countPods(s *scope) podCounts {
	c := podCounts{readyByGroup: map[string]int32{}}
	for i := range s.pods {
		p := &s.pods[i]
		// Only pods of the current spec count: status describes it.
		if s.desired.pods[p.Name] == nil || !p.DeletionTimestamp.IsZero() || outdated(p, s.desired.pods[p.Name]) {
			continue
		}
		c.existing++
		if p.Spec.NodeName != "" {
			c.bound++
		}
		if runningReady(p) {
			c.ready++
			c.readyByGroup[p.Labels[gpulabv1alpha1.GroupLabel]]++
			if p.Labels[gpulabv1alpha1.GroupLabel] == gpulabv1alpha1.HeadGroupName {
				c.headReady = true
			}
		}
	}
	return c
}

// computeStatus derives the whole status from the scope; old supplies the
// first-seen timestamps and condition transition times.
func computeStatus(s *scope, old *gpulabv1alpha1.GPUClusterStatus, now metav1.Time) gpulabv1alpha1.GPUClusterStatus {
	if s.invalid != nil {
		next := *old.DeepCopy()
		next.ObservedGeneration = s.cluster.Generation
		next.Phase = gpulabv1alpha1.ClusterFailed
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{
			Type: gpulabv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: gpulabv1alpha1.ReasonInvalidSpec,
			Message: s.invalid.Error(), ObservedGeneration: s.cluster.Generation, LastTransitionTime: now,
		})
		setReconcileCondition(&next.Conditions, s, now)
		return next
	}
	if s.desired == nil || !s.podsListed {
		// Nothing was observed this time: keep what we knew and say why.
		next := *old.DeepCopy()
		setReconcileCondition(&next.Conditions, s, now)
		return next
	}
	next := computeObserved(s, old, now)
	setReconcileCondition(&next.Conditions, s, now)
	if s.replacing != nil {
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{
			Type: gpulabv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: gpulabv1alpha1.ReasonReplacing,
			Message: s.replacing.Error(), ObservedGeneration: s.cluster.Generation, LastTransitionTime: now,
		})
		next.Phase = gpulabv1alpha1.ClusterPending
	}
	if s.conflict != nil {
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{
			Type: gpulabv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: gpulabv1alpha1.ReasonNameConflict,
			Message: s.conflict.Error(), ObservedGeneration: s.cluster.Generation, LastTransitionTime: now,
		})
		next.Phase = gpulabv1alpha1.ClusterFailed
	}
	return next
}

// setReconcileCondition records whether this reconcile succeeded, with its
// error: the one place a failed read or write shows up in status.
func setReconcileCondition(conditions *[]metav1.Condition, s *scope, now metav1.Time) {
	c := metav1.Condition{
		Type: gpulabv1alpha1.ConditionReconcileSucceeded, Status: metav1.ConditionTrue, Reason: gpulabv1alpha1.ReasonReconciled,
		Message: "the last reconcile completed", ObservedGeneration: s.cluster.Generation, LastTransitionTime: now,
	}
	switch {
	case s.conflict != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, gpulabv1alpha1.ReasonNameConflict, s.conflict.Error()
	case s.reconcileErr != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, gpulabv1alpha1.ReasonReconcileError, s.reconcileErr.Error()
	}
	meta.SetStatusCondition(conditions, c)
}

// computeObserved derives status from a reconcile that read the capacity
// and the pods.
func computeObserved(s *scope, old *gpulabv1alpha1.GPUClusterStatus, now metav1.Time) gpulabv1alpha1.GPUClusterStatus {
	suspended := s.cluster.Spec.Suspend
	counts := countPods(s)
	next := gpulabv1alpha1.GPUClusterStatus{
		ObservedGeneration: s.cluster.Generation,
		ScheduledTime:      old.ScheduledTime,
		ReadyTime:          old.ReadyTime,
		Conditions:         append([]metav1.Condition(nil), old.Conditions...),
		PodGroup:           s.podGroup,
	}
	for _, g := range s.desired.groups {
		next.Groups = append(next.Groups, gpulabv1alpha1.GroupStatus{
			Name: g.Name, Desired: g.Replicas, Ready: counts.readyByGroup[g.Name], GPUsPerPod: g.GPUsPerPod,
		})
		next.DesiredPods += g.Replicas
		next.GPUs += g.Replicas * g.GPUsPerPod
	}
	next.ReadyPods = counts.ready
	if next.PodGroup == nil && !suspended && s.gangErr == nil {
		// The gang was not touched this time (e.g. it cannot fit): keep what we knew.
		next.PodGroup = old.PodGroup
	}

	allBound := !suspended && next.DesiredPods > 0 && counts.bound == next.DesiredPods
	allReady := !suspended && next.DesiredPods > 0 && counts.ready == next.DesiredPods
	if suspended {
		next.ScheduledTime, next.ReadyTime = nil, nil
	}
	if allBound && next.ScheduledTime == nil {
		next.ScheduledTime = &now
	}
	if allReady && next.ReadyTime == nil {
		next.ReadyTime = &now
	}

	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.cluster.Generation, LastTransitionTime: now,
		})
	}
	v := s.desired.verdict
	msg := v.Message
	if len(s.staleInventories) > 0 {
		msg += fmt.Sprintf("; the GPUInventory of %s is stale (no agent heartbeat for %d intervals): counted from node allocatable",
			summarize(s.staleInventories), gpulabv1alpha1.StaleHeartbeats)
	}
	set(gpulabv1alpha1.ConditionSchedulable, v.Fits, v.Reason, msg)
	var notServed *scheduler.NotServedError
	gangMissing := errors.As(s.gangErr, &notServed)
	switch {
	case gangMissing:
		set(gpulabv1alpha1.ConditionGangScheduled, false, notServed.Reason, notServed.Message)
	case suspended:
		set(gpulabv1alpha1.ConditionGangScheduled, false, gpulabv1alpha1.ReasonSuspendRequested, "the cluster is suspended")
	case allBound:
		set(gpulabv1alpha1.ConditionGangScheduled, true, gpulabv1alpha1.ReasonAllPodsBound, fmt.Sprintf("all %d pods are bound", next.DesiredPods))
	case errors.Is(s.gangErr, scheduler.ErrReleasing):
		set(gpulabv1alpha1.ConditionGangScheduled, false, gpulabv1alpha1.ReasonPodsPending, "waiting for every pod to be bound; "+s.gangErr.Error())
	default:
		// No per-pod counts in messages: each would cost a status write.
		msg := "waiting for every pod to be bound"
		if next.PodGroup != nil && next.PodGroup.Phase != "" {
			msg += fmt.Sprintf("; PodGroup %s is %s", next.PodGroup.Name, next.PodGroup.Phase)
		}
		set(gpulabv1alpha1.ConditionGangScheduled, false, gpulabv1alpha1.ReasonPodsPending, msg)
	}
	c := s.desired.coverage
	set(gpulabv1alpha1.ConditionGangPolicyComplete, c.Complete, c.Reason, c.Message)
	if counts.headReady && !suspended {
		set(gpulabv1alpha1.ConditionHeadReady, true, gpulabv1alpha1.ReasonHeadPodReady, "the head pod is Ready")
	} else {
		set(gpulabv1alpha1.ConditionHeadReady, false, gpulabv1alpha1.ReasonHeadPodNotReady, "the head pod is missing or not Ready")
	}
	switch {
	case suspended:
		set(gpulabv1alpha1.ConditionReady, false, gpulabv1alpha1.ReasonSuspendRequested, "the cluster is suspended")
	case allReady:
		set(gpulabv1alpha1.ConditionReady, true, gpulabv1alpha1.ReasonPodsReady, fmt.Sprintf("all %d pods are Ready", next.DesiredPods))
	default:
		set(gpulabv1alpha1.ConditionReady, false, gpulabv1alpha1.ReasonPodsNotReady, "waiting for every pod to be Ready (see readyPods)")
	}
	if suspended {
		set(gpulabv1alpha1.ConditionSuspended, true, gpulabv1alpha1.ReasonSuspendRequested, "spec.suspend is true: pods deleted, gang released")
	} else {
		set(gpulabv1alpha1.ConditionSuspended, false, gpulabv1alpha1.ReasonNotSuspended, "spec.suspend is false")
	}

	switch {
	case suspended:
		next.Phase = gpulabv1alpha1.ClusterSuspended
	case gangMissing:
		next.Phase = gpulabv1alpha1.ClusterFailed
	case !v.Fits && !v.Grows:
		next.Phase = gpulabv1alpha1.ClusterUnschedulable
	case allReady:
		next.Phase = gpulabv1alpha1.ClusterReady
	case allBound:
		next.Phase = gpulabv1alpha1.ClusterProvisioning
	case v.Grows:
		next.Phase = gpulabv1alpha1.ClusterWaitingForNodes
	case counts.existing > 0:
		next.Phase = gpulabv1alpha1.ClusterScheduling
	default:
		next.Phase = gpulabv1alpha1.ClusterPending
	}
	if next.Phase == gpulabv1alpha1.ClusterReady && next.PodGroup != nil && next.PodGroup.Phase != "" {
		// The PodGroup's phase explains a gang that waits; a Ready gang
		// needs no explaining. Volcano moves its PodGroup to Running on its
		// own schedule, often after the pods are Ready: mirroring that was
		// one more status write per gang, and a stale mirror would mislead.
		pg := *next.PodGroup
		pg.Phase = ""
		next.PodGroup = &pg
	}
	return next
}

// runningReady says whether p counts towards its gang as up: Running and
// Ready.
func runningReady(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && podReady(p) }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
