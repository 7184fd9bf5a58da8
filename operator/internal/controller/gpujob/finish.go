package gpujob

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// finish records the verdict and applies the cleanup policy, which is what
// releases the gang: deleting or suspending the cluster removes its
// PodGroup, so the next job can use the queue's resources at once.
// The caller moves the job to phase.
func (r *Reconciler) finish(ctx context.Context, s *scope, phase gpulabv1alpha1.JobPhase, reason, msg string) error {
	st := &s.job.Status
	t := metav1.NewTime(s.now)
	st.CompletionTime = &t
	if st.StartTime != nil {
		st.Duration = s.now.Sub(st.StartTime.Time).Round(time.Second).String()
		r.metrics.ObserveDuration(string(phase), s.now.Sub(st.StartTime.Time))
	}
	if phase == gpulabv1alpha1.JobSucceeded {
		setCondition(s, gpulabv1alpha1.ConditionComplete, true, reason, msg)
	} else {
		setCondition(s, gpulabv1alpha1.ConditionFailed, true, reason, msg)
	}
	eventType := corev1.EventTypeNormal
	if phase == gpulabv1alpha1.JobFailed {
		eventType = corev1.EventTypeWarning
	}
	r.events.Eventf(s.job, nil, eventType, reason, "Finish", "%s", msg)
	var errs []error
	if reason == gpulabv1alpha1.ReasonDeadlineExceeded {
		// Past the deadline everything stops, whatever the policy keeps.
		errs = append(errs, r.deleteSubmitter(ctx, s))
	}
	switch policy := s.cleanupPolicy(); {
	case policy == gpulabv1alpha1.CleanupDeleteCluster:
		errs = append(errs, r.deleteCluster(ctx, s, st.ClusterName))
	case policy == gpulabv1alpha1.CleanupSuspendCluster || reason == gpulabv1alpha1.ReasonDeadlineExceeded:
		errs = append(errs, r.setClusterSuspend(ctx, s, true))
	}
	return errors.Join(errs...)
}

// expire handles a finished job: only ttlSecondsAfterFinished is left.
func (r *Reconciler) expire(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	phase := s.job.Status.Phase
	ttl := s.job.Spec.TTLSecondsAfterFinished
	if ttl == nil || s.job.Status.CompletionTime == nil {
		return phase, nil
	}
	expiry := s.job.Status.CompletionTime.Add(time.Duration(*ttl) * time.Second)
	if s.now.Before(expiry) {
		s.requeueBy(expiry)
		return phase, nil
	}
	if s.ownsCluster() && s.cleanupPolicy() == gpulabv1alpha1.CleanupKeepCluster {
		// The garbage collector would delete a kept cluster with its job.
		if err := r.orphanCluster(ctx, s); err != nil {
			return phase, err
		}
	}
	// The UID precondition: the cache may still hold a job that a same-named
	// new one has replaced; that one is never deleted by this one's TTL.
	uid := s.job.UID
	err := r.client.Delete(ctx, s.job, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return phase, fmt.Errorf("deleting expired GPUJob: %w", err)
	}
	return phase, nil
}

// orphanCluster removes the job's owner reference from its kept cluster, so
// deleting the job leaves the cluster running, as KeepCluster promises.
func (r *Reconciler) orphanCluster(ctx context.Context, s *scope) error {
	name := s.job.Status.ClusterName
	if name == "" {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gc := &gpulabv1alpha1.GPUCluster{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: s.job.Namespace, Name: name}, gc); err != nil {
			return client.IgnoreNotFound(err)
		}
		refs := gc.GetOwnerReferences()
		kept := slices.DeleteFunc(slices.Clone(refs), func(ref metav1.OwnerReference) bool { return ref.UID == s.job.UID })
		if len(kept) == len(refs) {
			return nil
		}
		gc.SetOwnerReferences(kept)
		if err := r.client.Update(ctx, gc); err != nil {
			return err
		}
		r.events.Eventf(s.job, gc, corev1.EventTypeNormal, "OrphanedCluster", "KeepCluster", "GPUCluster %s is kept: it no longer belongs to this job, which is deleted after ttlSecondsAfterFinished", name)
		return nil
	})
}

// writeStatus writes status if it changed since it was read, re-reading on
// a conflict and failing the reconcile if someone else moved it on (the
// next reconcile starts from what is there).
func (r *Reconciler) writeStatus(ctx context.Context, s *scope) error {
	s.job.Status.ObservedGeneration = s.job.Generation
	if equality.Semantic.DeepEqual(*s.old, s.job.Status) {
		return nil
	}
	if err := r.client.Status().Update(ctx, s.job); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing GPUJob status: %w", err)
	}
	s.old = s.job.Status.DeepCopy()
	return nil
}

// errStale aborts a reconcile that acted on an outdated copy of the job.
var errStale = errors.New("the cached GPUJob is behind the API server; retrying")

// confirmCurrent checks, with a read from the API server, that the job is
// as this reconcile saw it, before a create or a verdict that must happen
// once. A stale cache (our own status write not seen yet) would otherwise
// recreate a cluster the job already finished with, or finish a job twice:
// the second finish records a later completion time than the gang release
// of the first.
func (r *Reconciler) confirmCurrent(ctx context.Context, s *scope) error {
	fresh := &gpulabv1alpha1.GPUJob{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(s.job), fresh); err != nil {
		return err
	}
	if fresh.ResourceVersion != s.job.ResourceVersion {
		return errStale
	}
	return nil
}
