package incluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Phases of a submitted run (State.Phase).
const (
	PhasePending  = "Pending"  // no runner container running yet
	PhaseRunning  = "Running"  // the suite runs
	PhaseFinished = "Finished" // the suite exited; ExitCode is its code
	// PhaseFailed: the Job or its pod failed without the suite exiting
	// (no pod could be created, the pod was evicted or lost): there is no
	// verdict, and Reason says why.
	PhaseFailed  = "Failed"
	PhaseUnknown = "Unknown"
)

// State is a submitted run as the cluster shows it.
type State struct {
	// Phase is one of the Phase constants.
	Phase string
	// ExitCode is the suite's exit code once Finished (0 passed, 1 failed,
	// 3 partial), -1 before.
	ExitCode int32
	// Verdict is the stored results' verdict, "" before they are stored.
	Verdict string
	// Pod is the runner pod's name, "" before it exists.
	Pod string
	// Reason says why the pod is not running (an image pull, a
	// scheduling failure, a pod the Job controller cannot create), when
	// something says.
	Reason string
}

// failedCreate is the reason of the Job controller's event when it cannot
// create the Job's pod (a ResourceQuota, an admission denial).
const failedCreate = "FailedCreate"

// Status reads the run's Job (its conditions, and its FailedCreate events
// while it has no pod), pod and results ConfigMap.
func Status(ctx context.Context, c client.Client, namespace, runID string) (State, error) {
	st := State{Phase: PhaseUnknown, ExitCode: -1}
	var job batchv1.Job
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: JobName(runID)}, &job); err != nil {
		return st, fmt.Errorf("the runner Job of run %s: %w", runID, err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{RunnerLabel: runID}); err != nil {
		return st, err
	}
	st.Phase = PhasePending
	// The newest pod last: it is the one that tells.
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[i].CreationTimestamp.Before(&pods.Items[j].CreationTimestamp)
	})
	for i := range pods.Items {
		podState(&pods.Items[i], &st)
	}
	if st.Phase != PhaseFinished {
		for _, cond := range job.Status.Conditions {
			if (cond.Type == batchv1.JobFailed || cond.Type == batchv1.JobFailureTarget) && cond.Status == corev1.ConditionTrue {
				st.Phase, st.Reason = PhaseFailed, "Job "+string(cond.Type)+": "+cond.Reason+": "+cond.Message
			}
		}
	}
	if len(pods.Items) == 0 && st.Phase == PhasePending {
		reason, err := createFailure(ctx, c, &job)
		if err != nil {
			return st, err
		}
		st.Reason = reason
	}
	var cm corev1.ConfigMap
	switch err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ConfigMapName(runID)}, &cm); {
	case err == nil:
		st.Verdict = cm.Annotations[VerdictAnnotation]
	case !apierrors.IsNotFound(err):
		return st, err
	}
	return st, nil
}

// podState folds one runner pod into st.
func podState(p *corev1.Pod, st *State) {
	st.Pod = p.Name
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Terminated != nil:
			st.Phase, st.ExitCode, st.Reason = PhaseFinished, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason
			return
		case cs.State.Running != nil:
			st.Phase = PhaseRunning
		case cs.State.Waiting != nil:
			st.Reason = cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			st.Reason = cond.Reason + ": " + cond.Message
		}
	}
	// Failed with no container that ended: evicted, rejected by the
	// kubelet, or its node lost before the suite ran.
	if p.Status.Phase == corev1.PodFailed {
		st.Phase, st.Reason = PhaseFailed, "pod "+p.Name+" failed: "+orDash(p.Status.Reason)+": "+orDash(p.Status.Message)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// createFailure is the newest FailedCreate event of this Job (its UID: a
// Job of the same name before it had its own), "" when there is none. A
// submitter who may not read events gets "".
func createFailure(ctx context.Context, c client.Client, job *batchv1.Job) (string, error) {
	var events eventsv1.EventList
	err := c.List(ctx, &events, client.InNamespace(job.Namespace), client.MatchingFields{"regarding.name": job.Name, "reason": failedCreate})
	if apierrors.IsForbidden(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("the events of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	var newest *eventsv1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Regarding.Kind != "Job" || e.Regarding.UID != job.UID {
			continue
		}
		if newest == nil || eventTime(e).After(eventTime(newest)) {
			newest = e
		}
	}
	if newest == nil {
		return "", nil
	}
	return failedCreate + ": " + newest.Note, nil
}

func eventTime(e *eventsv1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.DeprecatedLastTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// FollowOptions tune Follow.
type FollowOptions struct {
	// StartTimeout bounds the wait for the runner pod to start. Defaults
	// to StartUpAllowance. The whole wait ends with ctx.
	StartTimeout time.Duration
	// Interval is how often the run's state is read. Defaults to a second.
	Interval time.Duration
}

// Follow copies the runner pod's log to w from its start until the run
// ends, and returns its final State. It waits for the pod to start first,
// failing when it cannot: an image that cannot be pulled, a Job that
// failed, or no start within StartTimeout, with what the cluster said.
func Follow(ctx context.Context, c client.Client, cs kubernetes.Interface, namespace, runID string, w io.Writer, o FollowOptions) (State, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = StartUpAllowance
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	st, err := waitStarted(ctx, c, namespace, runID, w, o)
	if err != nil || st.Phase == PhaseFinished {
		return st, err
	}
	stream, err := cs.CoreV1().Pods(namespace).GetLogs(st.Pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		return st, fmt.Errorf("following the runner pod %s: %w", st.Pod, err)
	}
	_, copyErr := io.Copy(w, bufio.NewReader(stream))
	_ = stream.Close()
	// The log ends when the container does; its exit code and the stored
	// verdict follow within moments.
	deadline := time.Now().Add(time.Minute)
	for {
		if st, err = Status(ctx, c, namespace, runID); err != nil {
			return st, err
		}
		if st.Phase == PhaseFailed {
			return st, fmt.Errorf("the runner stopped before the suite ended: %s", st.Reason)
		}
		if st.Phase == PhaseFinished && st.Verdict != "" || time.Now().After(deadline) {
			return st, copyErr
		}
		select {
		case <-ctx.Done():
			return st, context.Cause(ctx)
		case <-time.After(o.Interval / 2):
		}
	}
}

// waitStarted polls the run until its container runs or has ended, and
// fails at what will not change by waiting, or at StartTimeout.
func waitStarted(ctx context.Context, c client.Client, namespace, runID string, w io.Writer, o FollowOptions) (State, error) {
	deadline := time.Now().Add(o.StartTimeout)
	said := ""
	for {
		st, err := Status(ctx, c, namespace, runID)
		if err != nil {
			return st, err
		}
		switch {
		case st.Phase == PhaseRunning || st.Phase == PhaseFinished:
			return st, nil
		case st.Phase == PhaseFailed:
			return st, fmt.Errorf("the runner of run %s failed before the suite ran: %s", runID, st.Reason)
		case strings.HasPrefix(st.Reason, "ErrImagePull") || strings.HasPrefix(st.Reason, "ImagePullBackOff") || strings.HasPrefix(st.Reason, "InvalidImageName"):
			return st, fmt.Errorf("the runner pod %s cannot start: %s", st.Pod, st.Reason)
		case time.Now().After(deadline):
			return st, fmt.Errorf("the runner pod of run %s did not start within %s: %s", runID, o.StartTimeout, waiting(st))
		}
		if r := waiting(st); r != said {
			fmt.Fprintf(w, "waiting for the runner pod: %s\n", r)
			said = r
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the runner pod to start (%s): %w", waiting(st), context.Cause(ctx))
		case <-time.After(o.Interval):
		}
	}
}

// waiting says what a run that has not started waits for.
func waiting(st State) string {
	switch {
	case st.Reason != "":
		return st.Reason
	case st.Pod == "":
		return "the Job has no pod yet"
	}
	return "pod " + st.Pod + " is pending"
}
