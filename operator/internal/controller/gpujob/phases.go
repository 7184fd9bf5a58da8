package gpujob

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// A GPUJob is a phase machine. Each phase has one function that does the
// phase's work and returns the phase the job is in afterwards: the same one
// to wait for the next event, another to move on. Two rules apply in every
// unfinished phase first: the deadline (→ Failed) and a suspend request
// (→ Suspended). Every transition is written to status at once, so a
// restarted operator resumes in the phase the job was left in.
//
//	"" → Pending → Provisioning ⇄ Running → Succeeded | Failed
//	              (any unfinished phase) ⇄ Suspended
type phaseFunc func(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error)

// maxTransitions bounds how many phases one reconcile walks through; the
// longest useful walk is a new job's "" → Pending → Provisioning.
const maxTransitions = 5

func (r *Reconciler) phaseFunc(phase gpulabv1alpha1.JobPhase) phaseFunc {
	switch phase {
	case "":
		return r.start
	case gpulabv1alpha1.JobPending:
		return pending
	case gpulabv1alpha1.JobProvisioning:
		return r.provisioning
	case gpulabv1alpha1.JobRunning:
		return r.running
	case gpulabv1alpha1.JobSuspended:
		return r.suspended
	default: // Succeeded, Failed
		return r.expire
	}
}

// step walks the phase machine until the job waits in a phase.
func (r *Reconciler) step(ctx context.Context, s *scope) (ctrl.Result, error) {
	for range maxTransitions {
		from := s.job.Status.Phase
		next, err := r.interrupt(ctx, s)
		if err == nil && next == from {
			next, err = r.phaseFunc(from)(ctx, s)
		}
		if next != from {
			// A verdict stands even if its cleanup failed: write it.
			s.job.Status.Phase = next
			if werr := r.writeStatus(ctx, s); werr != nil {
				return s.result(), errors.Join(err, werr)
			}
		}
		if err != nil || next == from {
			return s.result(), err
		}
	}
	return s.result(), nil
}

// interrupt applies the rules of every unfinished phase once the job has
// started: past activeDeadlineSeconds (counted while not suspended) it
// fails, on spec.suspend it stops.
func (r *Reconciler) interrupt(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	st := &s.job.Status
	if st.StartTime == nil || s.finished() {
		return st.Phase, nil
	}
	// As with batch/v1, a suspended job's deadline is paused: a queue may
	// hold it suspended for hours, and resuming restarts the clock.
	if d := s.job.Spec.ActiveDeadlineSeconds; d != nil && st.Phase != gpulabv1alpha1.JobSuspended {
		deadline := st.StartTime.Add(time.Duration(*d) * time.Second)
		if !s.now.Before(deadline) {
			if err := r.confirmCurrent(ctx, s); err != nil {
				return st.Phase, err
			}
			return gpulabv1alpha1.JobFailed, r.finish(ctx, s, gpulabv1alpha1.JobFailed, gpulabv1alpha1.ReasonDeadlineExceeded,
				fmt.Sprintf("the job ran past activeDeadlineSeconds (%ds)", *d))
		}
		s.requeueBy(deadline)
	}
	if s.job.Spec.Suspend && st.Phase != gpulabv1alpha1.JobSuspended {
		// Suspended only once the submitter is gone and the cluster
		// suspended: the Suspended phase does not retry them.
		if err := r.suspend(ctx, s); err != nil {
			return st.Phase, err
		}
		return gpulabv1alpha1.JobSuspended, nil
	}
	return st.Phase, nil
}

// start records when the job started; the deadline counts from here.
func (r *Reconciler) start(_ context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	t := metav1.NewTime(s.now)
	s.job.Status.StartTime = &t
	return gpulabv1alpha1.JobPending, nil
}

// pending: nothing is created yet; the next step is the cluster.
func pending(context.Context, *scope) (gpulabv1alpha1.JobPhase, error) {
	return gpulabv1alpha1.JobProvisioning, nil
}

// provisioning makes sure the attempt has a cluster and waits for it to be
// Ready.
func (r *Reconciler) provisioning(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	ready, err := r.ensureCluster(ctx, s)
	if err != nil || !ready {
		return gpulabv1alpha1.JobProvisioning, err
	}
	return gpulabv1alpha1.JobRunning, nil
}

// running starts the attempt's submitter on the Ready cluster (back to
// Provisioning if the cluster is no longer Ready before it started), acts
// on its verdict, and fails the attempt if the cluster is lost under a
// running submitter.
func (r *Reconciler) running(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	if s.job.Status.SubmitTime == nil {
		ready, err := r.ensureCluster(ctx, s)
		if err != nil {
			return gpulabv1alpha1.JobRunning, err
		}
		if !ready {
			return gpulabv1alpha1.JobProvisioning, nil
		}
	}
	next, err := r.runSubmitter(ctx, s)
	if err != nil || next != gpulabv1alpha1.JobRunning || s.job.Status.SubmitTime == nil {
		return next, err
	}
	return r.clusterKept(ctx, s)
}

// suspended waits for spec.suspend to go back to false, then resumes the
// cluster; the deadline counts from the resume.
func (r *Reconciler) suspended(ctx context.Context, s *scope) (gpulabv1alpha1.JobPhase, error) {
	if s.job.Spec.Suspend {
		return gpulabv1alpha1.JobSuspended, nil
	}
	if err := r.setClusterSuspend(ctx, s, false); err != nil {
		return gpulabv1alpha1.JobSuspended, err
	}
	setCondition(s, gpulabv1alpha1.ConditionSuspended, false, gpulabv1alpha1.ReasonNotSuspended, "spec.suspend is false")
	t := metav1.NewTime(s.now)
	s.job.Status.StartTime = &t
	return gpulabv1alpha1.JobProvisioning, nil
}
