package gpujob

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/ownership"
)

// ensureCluster makes sure the attempt has a cluster and says whether it is
// Ready. A new cluster's name goes into status (written by the caller)
// before the create, so the create of a restarted operator finds it.
func (r *Reconciler) ensureCluster(ctx context.Context, s *scope) (bool, error) {
	st := &s.job.Status
	if st.Attempts == 0 {
		st.Attempts = 1
	}
	if !s.ownsCluster() {
		st.ClusterName = s.job.Spec.ClusterRef.Name
	} else if st.ClusterName == "" {
		st.ClusterName = gpulabv1alpha1.JobClusterName(s.job.Name, st.Attempts)
		return false, r.recordThenCreate(ctx, s)
	}
	gc := &gpulabv1alpha1.GPUCluster{}
	err := r.client.Get(ctx, client.ObjectKey{Namespace: s.job.Namespace, Name: st.ClusterName}, gc)
	switch {
	case apierrors.IsNotFound(err) && s.ownsCluster():
		return false, r.createCluster(ctx, s)
	case apierrors.IsNotFound(err):
		setCondition(s, gpulabv1alpha1.ConditionReady, false, gpulabv1alpha1.ReasonClusterNotFound, fmt.Sprintf("GPUCluster %s does not exist", st.ClusterName))
		return false, nil
	case err != nil:
		return false, err
	}
	if s.ownsCluster() {
		// A cluster of that name the job did not create is never used.
		if err := ownership.Check("GPUCluster", gc, s.job); err != nil {
			return false, err
		}
	}
	if gc.Status.Phase != gpulabv1alpha1.ClusterReady || gc.Status.ObservedGeneration != gc.Generation {
		setCondition(s, gpulabv1alpha1.ConditionReady, false, gpulabv1alpha1.ReasonClusterNotReady, fmt.Sprintf("GPUCluster %s is %s", gc.Name, gc.Status.Phase))
		return false, nil
	}
	if st.ClusterReadyTime == nil {
		t := metav1.NewTime(s.now)
		st.ClusterReadyTime = &t
	}
	setCondition(s, gpulabv1alpha1.ConditionReady, true, gpulabv1alpha1.ReasonClusterReady, fmt.Sprintf("GPUCluster %s is Ready", gc.Name))
	return true, nil
}

// clusterKept checks, while the submitter runs, that the attempt's cluster
// is still there: one deleted, being deleted, or replaced by a cluster the
// job does not control is a failed attempt (ClusterLost), so the retry
// policy applies instead of waiting on a submitter with nothing under it.
func (r *Reconciler) clusterKept(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	name := s.job.Status.ClusterName
	key := client.ObjectKey{Namespace: s.job.Namespace, Name: name}
	gc := &gpulabv1alpha1.GPUCluster{}
	err := r.client.Get(ctx, key, gc)
	if apierrors.IsNotFound(err) {
		// Not in the cache may be a cache behind the create: ask.
		err = r.apiReader.Get(ctx, key, gc)
	}
	var why string
	switch {
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("GPUCluster %s was deleted while submitter %s ran", name, s.job.Status.SubmitterName)
	case err != nil:
		return gpulabv1alpha1.JobRunning, err
	case !gc.DeletionTimestamp.IsZero():
		why = fmt.Sprintf("GPUCluster %s is being deleted while submitter %s runs", name, s.job.Status.SubmitterName)
	case s.ownsCluster() && ownership.Check("GPUCluster", gc, s.job) != nil:
		why = fmt.Sprintf("GPUCluster %s was replaced by one this job does not control", name)
	default:
		return gpulabv1alpha1.JobRunning, nil
	}
	if err := r.confirmCurrent(ctx, s); err != nil {
		return gpulabv1alpha1.JobRunning, err
	}
	if err := r.deleteSubmitter(ctx, s); err != nil {
		return gpulabv1alpha1.JobRunning, err
	}
	return r.attemptFailed(ctx, s, gpulabv1alpha1.ReasonClusterLost, why)
}

// recordThenCreate writes status now, so the name is durable before any
// create, then creates the cluster.
func (r *Reconciler) recordThenCreate(ctx context.Context, s *scope) error {
	if err := r.writeStatus(ctx, s); err != nil {
		return err
	}
	return r.createCluster(ctx, s)
}

func (r *Reconciler) createCluster(ctx context.Context, s *scope) error {
	if err := r.confirmCurrent(ctx, s); err != nil {
		return err
	}
	gc := &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.job.Namespace, Name: s.job.Status.ClusterName,
			Labels: map[string]string{JobLabel: s.job.Name}},
		Spec: *s.job.Spec.ClusterTemplate.DeepCopy(),
	}
	if err := controllerutil.SetControllerReference(s.job, gc, r.scheme); err != nil {
		return err
	}
	err := r.client.Create(ctx, gc)
	if apierrors.IsAlreadyExists(err) {
		return ownership.CheckExisting(ctx, r.apiReader, "GPUCluster", &gpulabv1alpha1.GPUCluster{}, client.ObjectKeyFromObject(gc), s.job)
	}
	if err != nil {
		return fmt.Errorf("creating GPUCluster %s: %w", gc.Name, err)
	}
	r.events.Eventf(s.job, gc, "Normal", "CreatedCluster", "CreateCluster", "Created GPUCluster %s (attempt %d)", gc.Name, s.job.Status.Attempts)
	return nil
}

// setClusterSuspend suspends or resumes the job's own cluster, which
// deletes its pods and releases its gang (or recreates them).
func (r *Reconciler) setClusterSuspend(ctx context.Context, s *scope, suspend bool) error {
	if !s.ownsCluster() || s.job.Status.ClusterName == "" {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gc := &gpulabv1alpha1.GPUCluster{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: s.job.Namespace, Name: s.job.Status.ClusterName}, gc); err != nil {
			return client.IgnoreNotFound(err)
		}
		if err := ownership.Check("GPUCluster", gc, s.job); err != nil {
			return err
		}
		if gc.Spec.Suspend == suspend {
			return nil
		}
		gc.Spec.Suspend = suspend
		return r.client.Update(ctx, gc)
	})
}

// deleteCluster deletes the job's own cluster: never a referenced one, and
// never one of that name the job does not control.
func (r *Reconciler) deleteCluster(ctx context.Context, s *scope, name string) error {
	if !s.ownsCluster() || name == "" {
		return nil
	}
	gc := &gpulabv1alpha1.GPUCluster{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: s.job.Namespace, Name: name}, gc); err != nil {
		return client.IgnoreNotFound(err)
	}
	return deleteOwned(ctx, r.client, "GPUCluster", gc, s.job)
}

// deleteOwned deletes obj, as read, if owner controls it; the UID
// precondition keeps a same-named replacement safe.
func deleteOwned(ctx context.Context, c client.Client, kind string, obj client.Object, owner metav1.Object) error {
	if err := ownership.Check(kind, obj, owner); err != nil {
		return err
	}
	uid := obj.GetUID()
	err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s: %w", kind, obj.GetName(), err)
	}
	return nil
}

// suspend stops the run: the submitter goes, the cluster is suspended. The
// caller moves the job to Suspended.
func (r *Reconciler) suspend(ctx context.Context, s *scope) error {
	if err := r.deleteSubmitter(ctx, s); err != nil {
		return err
	}
	if err := r.setClusterSuspend(ctx, s, true); err != nil {
		return err
	}
	s.job.Status.SubmitterName, s.job.Status.SubmitTime, s.job.Status.ClusterReadyTime = "", nil, nil
	setCondition(s, gpulabv1alpha1.ConditionSuspended, true, gpulabv1alpha1.ReasonSuspendRequested, "spec.suspend is true: submitter deleted, cluster suspended")
	return nil
}

func setCondition(s *scope, typ string, ok bool, reason, msg string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&s.job.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: s.job.Generation, LastTransitionTime: metav1.NewTime(s.now)})
}
