package runner

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// State is a submitted run as the cluster shows it.
type State struct {
	// Phase is the Job's: Pending (no pod running yet), Running,
	// Finished (the run ended, its pod exited), or Unknown.
	Phase string
	// ExitCode is the suite's exit code once Finished (0 passed, 1 failed,
	// 3 partial), -1 before.
	ExitCode int32
	// Verdict is the stored results' verdict, "" before they are stored.
	Verdict string
	// Pod is the runner pod's name, "" before it exists.
	Pod string
	// Reason says why the pod is not running (an image pull, a
	// scheduling failure), when it says.
	Reason string
}

// Status reads the run's Job, pod and results ConfigMap.
func Status(ctx context.Context, c client.Client, namespace, runID string) (State, error) {
	st := State{Phase: "Unknown", ExitCode: -1}
	var job batchv1.Job
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: JobName(runID)}, &job); err != nil {
		return st, fmt.Errorf("the runner Job of run %s: %w", runID, err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{RunnerLabel: runID}); err != nil {
		return st, err
	}
	st.Phase = "Pending"
	for i := range pods.Items {
		p := &pods.Items[i]
		st.Pod = p.Name
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Terminated != nil:
				st.Phase, st.ExitCode, st.Reason = "Finished", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason
			case cs.State.Running != nil:
				st.Phase = "Running"
			case cs.State.Waiting != nil:
				st.Reason = cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				st.Reason = cond.Reason + ": " + cond.Message
			}
		}
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

// Follow copies the runner pod's log to w from its start until the run
// ends, and returns its final State. It waits for the pod to start first,
// failing when it cannot (an image that cannot be pulled, no room).
func Follow(ctx context.Context, c client.Client, cs kubernetes.Interface, namespace, runID string, w io.Writer) (State, error) {
	var st State
	var err error
	for {
		if st, err = Status(ctx, c, namespace, runID); err != nil {
			return st, err
		}
		if st.Phase == "Running" || st.Phase == "Finished" {
			break
		}
		if strings.HasPrefix(st.Reason, "ErrImagePull") || strings.HasPrefix(st.Reason, "ImagePullBackOff") || strings.HasPrefix(st.Reason, "InvalidImageName") {
			return st, fmt.Errorf("the runner pod %s cannot start: %s", st.Pod, st.Reason)
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the runner pod to start (%s): %w", st.Reason, ctx.Err())
		case <-time.After(time.Second):
		}
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
		if st.Phase == "Finished" && st.Verdict != "" || time.Now().After(deadline) {
			return st, copyErr
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
