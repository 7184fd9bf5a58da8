package gpujob

import (
	"context"
	"fmt"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/ownership"
)

// runSubmitter runs the attempt's submitter on the Ready cluster and acts
// on its verdict: it returns Running while it runs, Succeeded or Failed on
// the verdict, or Provisioning for the next attempt.
func (r *Reconciler) runSubmitter(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	st := &s.job.Status
	if st.SubmitterName == "" {
		st.SubmitterName = gpulabv1alpha1.SubmitterName(s.job.Name, st.Attempts)
		if err := r.writeStatus(ctx, s); err != nil {
			return gpulabv1alpha1.JobRunning, err
		}
	}
	sub := &batchv1.Job{}
	key := client.ObjectKey{Namespace: s.job.Namespace, Name: st.SubmitterName}
	err := r.client.Get(ctx, key, sub)
	if apierrors.IsNotFound(err) {
		if st.SubmitTime == nil {
			return gpulabv1alpha1.JobRunning, r.createSubmitter(ctx, s)
		}
		// Created before, gone now (or not in the cache yet): ask the API
		// server. A submitter deleted before its verdict is a failed
		// attempt; running the workload again under the same name would
		// hide that it ran at all.
		err = r.apiReader.Get(ctx, key, sub)
		if apierrors.IsNotFound(err) {
			if err := r.confirmCurrent(ctx, s); err != nil {
				return gpulabv1alpha1.JobRunning, err
			}
			return r.attemptFailed(ctx, s, gpulabv1alpha1.ReasonSubmitterDeleted,
				fmt.Sprintf("submitter %s was deleted before it finished", st.SubmitterName))
		}
	}
	if err != nil {
		return gpulabv1alpha1.JobRunning, err
	}
	if err := ownership.Check("Job", sub, s.job); err != nil {
		return gpulabv1alpha1.JobRunning, err
	}
	verdict := jobCondition(sub, batchv1.JobComplete) || jobCondition(sub, batchv1.JobFailed) || !sub.DeletionTimestamp.IsZero()
	if verdict {
		// A verdict counts a failure or finishes the job and releases the
		// gang: never twice from a cached copy that missed the last write.
		if err := r.confirmCurrent(ctx, s); err != nil {
			return gpulabv1alpha1.JobRunning, err
		}
	}
	switch {
	case jobCondition(sub, batchv1.JobComplete):
		return gpulabv1alpha1.JobSucceeded, r.finish(ctx, s, gpulabv1alpha1.JobSucceeded, gpulabv1alpha1.ReasonSubmitterSucceeded, fmt.Sprintf("submitter %s completed", sub.Name))
	case jobCondition(sub, batchv1.JobFailed):
		return r.attemptFailed(ctx, s, gpulabv1alpha1.ReasonSubmitterFailed, fmt.Sprintf("submitter %s failed", sub.Name))
	case !sub.DeletionTimestamp.IsZero():
		// Being deleted without a verdict (batch/v1 Jobs orphan by default,
		// so this can last): the attempt is over.
		return r.attemptFailed(ctx, s, gpulabv1alpha1.ReasonSubmitterDeleted,
			fmt.Sprintf("submitter %s was deleted before it finished", sub.Name))
	}
	return gpulabv1alpha1.JobRunning, nil
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// createSubmitter renders the submitter Job: the user's pod template with
// the cluster's coordinates in its environment, never retried by the Job
// controller (retries are whole-job, here), and placed by the default
// scheduler, outside the gang, so the gang never waits for it.
func (r *Reconciler) createSubmitter(ctx context.Context, s *scope) error {
	if err := r.confirmCurrent(ctx, s); err != nil {
		return err
	}
	st := &s.job.Status
	pods, err := r.clusterPods(ctx, s)
	if err != nil {
		return err
	}
	tmpl := s.job.Spec.Submitter.DeepCopy()
	if tmpl.Spec.RestartPolicy == "" || tmpl.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[JobLabel] = s.job.Name
	env := []corev1.EnvVar{
		{Name: gpulabv1alpha1.EnvClusterName, Value: st.ClusterName},
		{Name: gpulabv1alpha1.EnvHeadAddress, Value: gpulabv1alpha1.HeadAddress(st.ClusterName, s.job.Namespace)},
		{Name: gpulabv1alpha1.EnvClusterPods, Value: strings.Join(pods, ",")},
		{Name: gpulabv1alpha1.EnvAttempt, Value: fmt.Sprint(st.Attempts)},
	}
	for i := range tmpl.Spec.Containers {
		tmpl.Spec.Containers[i].Env = append(tmpl.Spec.Containers[i].Env, env...)
	}
	sub := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.job.Namespace, Name: st.SubmitterName, Labels: map[string]string{JobLabel: s.job.Name}},
		Spec:       batchv1.JobSpec{BackoffLimit: new(int32(0)), Template: *tmpl},
	}
	if err := controllerutil.SetControllerReference(s.job, sub, r.scheme); err != nil {
		return err
	}
	err = r.client.Create(ctx, sub)
	if apierrors.IsAlreadyExists(err) {
		// Ours (a restart between create and status write) or someone else's.
		err = ownership.CheckExisting(ctx, r.apiReader, "Job", &batchv1.Job{}, client.ObjectKeyFromObject(sub), s.job)
	}
	if err != nil {
		return fmt.Errorf("creating submitter %s: %w", sub.Name, err)
	}
	t := metav1.NewTime(s.now)
	st.SubmitTime = &t
	r.metrics.ObserveTimeToStart(s.now.Sub(s.job.CreationTimestamp.Time))
	r.events.Eventf(s.job, sub, corev1.EventTypeNormal, "CreatedSubmitter", "CreateSubmitter", "Created submitter %s on GPUCluster %s", sub.Name, st.ClusterName)
	return nil
}

// clusterPods lists the cluster's pod names, sorted, for the submitter.
func (r *Reconciler) clusterPods(ctx context.Context, s *scope) ([]string, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(s.job.Namespace),
		client.MatchingLabels{gpulabv1alpha1.ClusterLabel: s.job.Status.ClusterName}); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(pods.Items))
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names, nil
}

// attemptFailed counts a failed run (why says how: the submitter failed or
// was deleted) and either fails the job or starts the next attempt (a fresh
// cluster with RetryNewCluster).
func (r *Reconciler) attemptFailed(ctx context.Context, s *scope, reason, why string) (gpulabv1alpha1.JobPhase, error) {
	st := &s.job.Status
	st.Failures++
	if st.Failures > s.backoffLimit() {
		return gpulabv1alpha1.JobFailed, r.finish(ctx, s, gpulabv1alpha1.JobFailed, gpulabv1alpha1.ReasonBackoffLimitExceeded,
			fmt.Sprintf("%s; %d failures exceed backoffLimit %d", why, st.Failures, s.backoffLimit()))
	}
	r.events.Eventf(s.job, nil, corev1.EventTypeWarning, reason, "Retry", "Attempt %d failed (%s); retrying", st.Attempts, why)
	old := st.ClusterName
	st.Attempts++
	st.SubmitterName, st.SubmitTime, st.ClusterReadyTime = "", nil, nil
	if s.retryPolicy() == gpulabv1alpha1.RetryNewCluster {
		st.ClusterName = ""
		// The failed attempt's cluster goes: its gang is released at once.
		return gpulabv1alpha1.JobProvisioning, r.deleteCluster(ctx, s, old)
	}
	return gpulabv1alpha1.JobProvisioning, nil
}

// deleteSubmitter deletes the current submitter and its pods, if the job
// controls it.
func (r *Reconciler) deleteSubmitter(ctx context.Context, s *scope) error {
	if s.job.Status.SubmitterName == "" {
		return nil
	}
	sub := &batchv1.Job{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: s.job.Namespace, Name: s.job.Status.SubmitterName}, sub); err != nil {
		return client.IgnoreNotFound(err)
	}
	return deleteOwned(ctx, r.client, "Job", sub, s.job)
}
