package incluster_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// A run whose pod never starts is not Pending forever: Status reads the
// Job's conditions, a pod that failed before its container ran, and the
// Job controller's FailedCreate events (envtest runs no Job controller:
// the test writes what it would; conformance/cli's submit test runs the
// real one), and Follow fails naming the reason.
func TestStatusSeesRunsThatNeverStart(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{})
	c := env.Client
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "runner-status"
	submit := func(id string) *batchv1.Job {
		t.Helper()
		if _, err := incluster.Submit(ctx, c, incluster.Options{Namespace: ns, Image: "i", RunID: id}); err != nil {
			t.Fatal(err)
		}
		var job batchv1.Job
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: incluster.JobName(id)}, &job); err != nil {
			t.Fatal(err)
		}
		return &job
	}
	follow := func(id string) (incluster.State, string, error) {
		var log bytes.Buffer
		st, err := incluster.Follow(ctx, c, cs, ns, id, &log, incluster.FollowOptions{StartTimeout: 2 * time.Second, Interval: 100 * time.Millisecond})
		return st, log.String(), err
	}

	// No pod: the Job controller could not create one.
	quota := submit("quota")
	msg := `Error creating: pods "gpulab-conformance-quota-x" is forbidden: exceeded quota: no-pods, requested: pods=1, used: pods=0, limited: pods=0`
	now := metav1.NowMicro()
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quota.1"}, EventTime: now, ReportingController: "job-controller",
		ReportingInstance: "kcm", Action: "Create", Reason: "FailedCreate", Type: corev1.EventTypeWarning, Note: msg,
		Regarding: corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: ns, Name: quota.Name, UID: quota.UID}}
	if err := c.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	st, err := incluster.Status(ctx, c, ns, "quota")
	if err != nil || st.Phase != incluster.PhasePending || !strings.Contains(st.Reason, "FailedCreate: "+msg) {
		t.Errorf("Status of a Job that cannot create its pod: %+v, %v", st, err)
	}
	start := time.Now()
	if _, log, err := follow("quota"); err == nil || !strings.Contains(err.Error(), "exceeded quota: no-pods") ||
		!strings.Contains(err.Error(), "did not start within 2s") || !strings.Contains(log, "exceeded quota") {
		t.Errorf("Follow: %v (log %q), want the start-up timeout naming the quota", err, log)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Follow took %s to give up, want about its 2s StartTimeout", d)
	}

	// The Job failed (an admission policy, a deadline): no waiting.
	failed := submit("failed")
	failed.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"},
	}
	failed.Status.StartTime = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	if err := c.Status().Update(ctx, failed); err != nil {
		t.Fatal(err)
	}
	if st, _, err := follow("failed"); err == nil || st.Phase != incluster.PhaseFailed || !strings.Contains(err.Error(), "DeadlineExceeded") {
		t.Errorf("Follow of a failed Job: %+v, %v; want Failed naming DeadlineExceeded", st, err)
	}

	// The pod failed before its container ran (evicted): no exit code,
	// no verdict, and no waiting either.
	submit("evicted")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "evicted-pod", Labels: map[string]string{incluster.RunnerLabel: "evicted"}},
		Spec: incluster.Job(incluster.Options{Namespace: ns, Image: "i", RunID: "evicted"}).Spec.Template.Spec}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if st, _, err := follow("evicted"); err == nil || st.Phase != incluster.PhaseFailed || st.ExitCode != -1 || !strings.Contains(err.Error(), "Evicted") {
		t.Errorf("Follow of an evicted pod: %+v, %v; want Failed naming the eviction", st, err)
	}

	// A suite that exited 1 (FAILED) fails its Job too: that is the run's
	// verdict, not a runner failure.
	done := submit("done")
	pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "done-pod", Labels: map[string]string{incluster.RunnerLabel: "done"}},
		Spec: incluster.Job(incluster.Options{Namespace: ns, Image: "i", RunID: "done"}).Spec.Template.Spec}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "conformance",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	done.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
	}
	done.Status.StartTime = &metav1.Time{Time: time.Now().Add(-time.Minute)}
	if err := c.Status().Update(ctx, done); err != nil {
		t.Fatal(err)
	}
	if st, err := incluster.Status(ctx, c, ns, "done"); err != nil || st.Phase != incluster.PhaseFinished || st.ExitCode != 1 {
		t.Errorf("Status of a FAILED run: %+v, %v; want Finished, exit 1", st, err)
	}
}
