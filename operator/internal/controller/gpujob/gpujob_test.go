package gpujob_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

const timeout = 30 * time.Second

// env is a real API server; tests play the kubelet for cluster pods and
// the Job controller for submitters (envtest runs neither).
var env *envtest.Environment

func TestMain(m *testing.M) { os.Exit(testutil.RunWithEnv(m, &env)) }

func setup(t *testing.T, traffic *testutil.Traffic) (client.Client, string) {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{Traffic: traffic})
	return env.Client, testutil.NewNamespace(t, env.Client)
}

func newJob(ns, name string) *gpulabv1alpha1.GPUJob {
	return &gpulabv1alpha1.GPUJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gpulabv1alpha1.GPUJobSpec{
			ClusterTemplate: &testutil.NewCluster(ns, "unused", 1, 1).Spec,
			Submitter:       testutil.PodTemplate("submit", nil),
		},
	}
}

func getJob(t *testing.T, c client.Client, ns, name string) *gpulabv1alpha1.GPUJob {
	t.Helper()
	j := &gpulabv1alpha1.GPUJob{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, j); err != nil {
		t.Fatal(err)
	}
	return j
}

// waitSubmitter plays the kubelet until the job's submitter exists, and
// returns it.
func waitSubmitter(t *testing.T, c client.Client, ns, name string) *batchv1.Job {
	t.Helper()
	sub := &batchv1.Job{}
	testutil.Eventually(t, timeout, "submitter "+name, func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sub)
		return err == nil, fmt.Sprint(err)
	})
	return sub
}

// finishSubmitter plays the Job controller: the submitter succeeds or fails.
func finishSubmitter(t *testing.T, c client.Client, sub *batchv1.Job, succeed bool) {
	t.Helper()
	now := metav1.Now()
	sub.Status.StartTime = &now
	if succeed {
		sub.Status.Succeeded = 1
		sub.Status.CompletionTime = &now
		sub.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	} else {
		sub.Status.Failed = 1
		sub.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
		}
	}
	if err := c.Status().Update(context.Background(), sub); err != nil {
		t.Fatalf("finishing submitter %s: %v", sub.Name, err)
	}
}

func waitPhase(t *testing.T, c client.Client, ns, name string, phase gpulabv1alpha1.JobPhase) *gpulabv1alpha1.GPUJob {
	t.Helper()
	var j *gpulabv1alpha1.GPUJob
	testutil.Eventually(t, timeout, fmt.Sprintf("job %s %s", name, phase), func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		j = getJob(t, c, ns, name)
		return j.Status.Phase == phase, fmt.Sprintf("phase %q %+v", j.Status.Phase, j.Status.Conditions)
	})
	return j
}

func clusterGone(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	testutil.Eventually(t, timeout, "cluster "+name+" deleted", func() (bool, string) {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &gpulabv1alpha1.GPUCluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func TestJobSucceeds(t *testing.T) {
	c, ns := setup(t, nil)
	if err := c.Create(context.Background(), newJob(ns, "ok")); err != nil {
		t.Fatal(err)
	}
	sub := waitSubmitter(t, c, ns, "ok-submit-1")
	env := map[string]string{}
	for _, e := range sub.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["GPULAB_CLUSTER_NAME"] != "ok-1" || env["GPULAB_HEAD_ADDRESS"] != "ok-1-head."+ns+".svc" || !strings.Contains(env["GPULAB_CLUSTER_PODS"], "ok-1-workers-0") {
		t.Errorf("submitter environment %v", env)
	}
	if sub.Spec.Template.Spec.SchedulerName == "volcano" || sub.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("submitter must stay outside the gang and never restart: %+v", sub.Spec.Template.Spec)
	}
	// The submit time is written after the create the submitter came from.
	testutil.Eventually(t, timeout, "the running job's status", func() (bool, string) {
		j := getJob(t, c, ns, "ok")
		return j.Status.Phase == gpulabv1alpha1.JobRunning && j.Status.ClusterReadyTime != nil && j.Status.SubmitTime != nil, fmt.Sprintf("%+v", j.Status)
	})
	finishSubmitter(t, c, sub, true)
	j := waitPhase(t, c, ns, "ok", gpulabv1alpha1.JobSucceeded)
	if j.Status.CompletionTime == nil || j.Status.Duration == "" || j.Status.Attempts != 1 || !meta.IsStatusConditionTrue(j.Status.Conditions, gpulabv1alpha1.ConditionComplete) {
		t.Errorf("succeeded job status %+v", j.Status)
	}
	clusterGone(t, c, ns, "ok-1") // DeleteCluster by default: the gang is released
}

func TestJobRetriesThenFails(t *testing.T) {
	c, ns := setup(t, nil)
	j := newJob(ns, "flaky")
	j.Spec.BackoffLimit = new(int32(1))
	if err := c.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "flaky-submit-1"), false)
	clusterGone(t, c, ns, "flaky-1") // NewCluster: the failed attempt's cluster goes
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "flaky-submit-2"), false)
	got := waitPhase(t, c, ns, "flaky", gpulabv1alpha1.JobFailed)
	cond := meta.FindStatusCondition(got.Status.Conditions, gpulabv1alpha1.ConditionFailed)
	if got.Status.Attempts != 2 || got.Status.Failures != 2 || cond == nil || cond.Reason != gpulabv1alpha1.ReasonBackoffLimitExceeded {
		t.Errorf("status %+v", got.Status)
	}
	clusterGone(t, c, ns, "flaky-2")
}

func TestJobDeadline(t *testing.T) {
	c, ns := setup(t, nil)
	j := newJob(ns, "slow")
	j.Spec.ActiveDeadlineSeconds = new(int64(2))
	j.Spec.CleanupPolicy = gpulabv1alpha1.CleanupKeepCluster
	// A cluster that can never fit never becomes Ready.
	j.Spec.ClusterTemplate.WorkerGroups[0].Replicas = 100
	if err := c.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	var got *gpulabv1alpha1.GPUJob
	testutil.Eventually(t, timeout, "deadline", func() (bool, string) {
		got = getJob(t, c, ns, "slow")
		return got.Status.Phase == gpulabv1alpha1.JobFailed, string(got.Status.Phase)
	})
	if cond := meta.FindStatusCondition(got.Status.Conditions, gpulabv1alpha1.ConditionFailed); cond == nil || cond.Reason != gpulabv1alpha1.ReasonDeadlineExceeded {
		t.Errorf("conditions %+v", got.Status.Conditions)
	}
	// Everything stops past the deadline, even with KeepCluster.
	testutil.Eventually(t, timeout, "cluster suspended", func() (bool, string) {
		gc := testutil.GetCluster(t, c, ns, "slow-1")
		return gc.Spec.Suspend, "not suspended"
	})
}

func TestJobSuspendResume(t *testing.T) {
	c, ns := setup(t, nil)
	if err := c.Create(context.Background(), newJob(ns, "pause")); err != nil {
		t.Fatal(err)
	}
	waitSubmitter(t, c, ns, "pause-submit-1")
	setSuspend := func(v bool) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			j := getJob(t, c, ns, "pause")
			j.Spec.Suspend = v
			return c.Update(context.Background(), j)
		}); err != nil {
			t.Fatal(err)
		}
	}
	setSuspend(true)
	waitPhase(t, c, ns, "pause", gpulabv1alpha1.JobSuspended)
	testutil.Eventually(t, timeout, "submitter deleted and cluster suspended", func() (bool, string) {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pause-submit-1"}, &batchv1.Job{})
		gc := testutil.GetCluster(t, c, ns, "pause-1")
		return apierrors.IsNotFound(err) && gc.Spec.Suspend, fmt.Sprintf("submitter: %v, cluster suspend %v", err, gc.Spec.Suspend)
	})
	setSuspend(false)
	testutil.Eventually(t, timeout, "resumed", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		gc := testutil.GetCluster(t, c, ns, "pause-1")
		j := getJob(t, c, ns, "pause")
		return !gc.Spec.Suspend && j.Status.Phase == gpulabv1alpha1.JobRunning, fmt.Sprintf("cluster suspend %v, job %s", gc.Spec.Suspend, j.Status.Phase)
	})
}

func TestCleanupPoliciesAndTTL(t *testing.T) {
	c, ns := setup(t, nil)
	keep := newJob(ns, "keep")
	keep.Spec.CleanupPolicy = gpulabv1alpha1.CleanupKeepCluster
	suspend := newJob(ns, "nap")
	suspend.Spec.CleanupPolicy = gpulabv1alpha1.CleanupSuspendCluster
	for _, j := range []*gpulabv1alpha1.GPUJob{keep, suspend} {
		if err := c.Create(context.Background(), j); err != nil {
			t.Fatal(err)
		}
		finishSubmitter(t, c, waitSubmitter(t, c, ns, j.Name+"-submit-1"), true)
		waitPhase(t, c, ns, j.Name, gpulabv1alpha1.JobSucceeded)
	}
	// A TTL of 0 deletes the job as soon as it finished: only a watch,
	// which delivers every change in order, is sure to see it Succeeded
	// first (a poll may find it gone already).
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w, err := wc.Watch(ctx, &gpulabv1alpha1.GPUJobList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": "brief"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ttl := newJob(ns, "brief")
	ttl.Spec.TTLSecondsAfterFinished = new(int32(0))
	if err := c.Create(context.Background(), ttl); err != nil {
		t.Fatal(err)
	}
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "brief-submit-1"), true)
	succeeded := false
	for ev := range w.ResultChan() {
		j, ok := ev.Object.(*gpulabv1alpha1.GPUJob)
		if !ok {
			t.Fatalf("watch: %v", ev.Object)
		}
		if ev.Type == watch.Deleted {
			if !succeeded {
				t.Fatalf("the TTL deleted the job before it was seen Succeeded (last phase %q)", j.Status.Phase)
			}
			break
		}
		succeeded = succeeded || j.Status.Phase == gpulabv1alpha1.JobSucceeded
	}
	if ctx.Err() != nil {
		t.Fatalf("the TTL did not delete the job within %v (seen Succeeded: %v)", timeout, succeeded)
	}
	if gc := testutil.GetCluster(t, c, ns, "keep-1"); gc.Spec.Suspend {
		t.Errorf("KeepCluster suspended the cluster")
	}
	testutil.Eventually(t, timeout, "SuspendCluster", func() (bool, string) {
		return testutil.GetCluster(t, c, ns, "nap-1").Spec.Suspend, "not suspended"
	})
}

// TestRestartAfterRecordingBeforeCreating: the first operator records the
// cluster's name but every create fails, then it dies; the second creates
// exactly that cluster, once, and the job runs to the end.
func TestRestartAfterRecordingBeforeCreating(t *testing.T) {
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	broken := testutil.NewTraffic()
	broken.FailRequest = func(r *http.Request) bool {
		return r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/gpuclusters") || strings.HasSuffix(r.URL.Path, "/jobs"))
	}
	first := testutil.StartManager(t, env.Config, testutil.ManagerOptions{Traffic: broken})
	c, ns := env.Client, testutil.NewNamespace(t, env.Client)
	if err := c.Create(context.Background(), newJob(ns, "crash")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, "cluster name recorded", func() (bool, string) {
		j := getJob(t, c, ns, "crash")
		return j.Status.ClusterName == "crash-1", j.Status.ClusterName
	})
	first.Stop()
	var list gpulabv1alpha1.GPUClusterList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("clusters before restart: %d (%v)", len(list.Items), err)
	}
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "crash-submit-1"), true)
	waitPhase(t, c, ns, "crash", gpulabv1alpha1.JobSucceeded)
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, gc := range list.Items {
		if gc.Name != "crash-1" {
			t.Errorf("unexpected cluster %s", gc.Name)
		}
	}
}

// TestRestartAfterRecordingSubmitter: the first operator gets the cluster
// Ready and records the submitter's name, but the submitter create fails
// and it dies; the second creates exactly that submitter.
func TestRestartAfterRecordingSubmitter(t *testing.T) {
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	broken := testutil.NewTraffic()
	broken.FailRequest = func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/jobs")
	}
	first := testutil.StartManager(t, env.Config, testutil.ManagerOptions{Traffic: broken})
	c, ns := env.Client, testutil.NewNamespace(t, env.Client)
	if err := c.Create(context.Background(), newJob(ns, "late")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, "submitter name recorded", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		j := getJob(t, c, ns, "late")
		return j.Status.SubmitterName == "late-submit-1", j.Status.SubmitterName
	})
	first.Stop()
	var subs batchv1.JobList
	if err := c.List(context.Background(), &subs, client.InNamespace(ns)); err != nil || len(subs.Items) != 0 {
		t.Fatalf("submitters before restart: %d (%v)", len(subs.Items), err)
	}
	second := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "late-submit-1"), true)
	waitPhase(t, c, ns, "late", gpulabv1alpha1.JobSucceeded)
	if n := second.Traffic.Count("POST jobs"); n != 1 {
		t.Errorf("the second operator created %d submitters, want 1", n)
	}
	if n := second.Traffic.Count("POST gpuclusters"); n != 0 {
		t.Errorf("the second operator created %d clusters, want 0", n)
	}
}

// TestDeadlineCountsOnlyUnsuspendedTime: as with batch/v1 Jobs, time spent
// suspended (queued, for a job created suspended) does not count against
// activeDeadlineSeconds, and resuming restarts the clock.
func TestDeadlineCountsOnlyUnsuspendedTime(t *testing.T) {
	c, ns := setup(t, nil)
	j := newJob(ns, "queued")
	j.Spec.Suspend = true
	j.Spec.ActiveDeadlineSeconds = new(int64(2))
	if err := c.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	started := waitPhase(t, c, ns, "queued", gpulabv1alpha1.JobSuspended).Status.StartTime
	if started == nil {
		t.Fatal("no startTime")
	}
	// Suspended past the deadline, and still Suspended, not Failed.
	past := started.Add(3 * time.Second)
	testutil.Eventually(t, timeout, "suspended past the deadline", func() (bool, string) {
		got := getJob(t, c, ns, "queued")
		if got.Status.Phase != gpulabv1alpha1.JobSuspended {
			t.Fatalf("phase %s while suspended: %+v", got.Status.Phase, got.Status.Conditions)
		}
		return time.Now().After(past), "before the deadline"
	})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		j := getJob(t, c, ns, "queued")
		j.Spec.Suspend = false
		return c.Update(context.Background(), j)
	}); err != nil {
		t.Fatal(err)
	}
	sub := waitSubmitter(t, c, ns, "queued-submit-1")
	got := getJob(t, c, ns, "queued")
	if got.Status.Phase == gpulabv1alpha1.JobFailed || got.Status.StartTime == nil || got.Status.StartTime.Time.Before(past) {
		t.Fatalf("after resume: phase %s, startTime %v (want not before %v: it restarts at the resume)", got.Status.Phase, got.Status.StartTime, past)
	}
	finishSubmitter(t, c, sub, true)
	waitPhase(t, c, ns, "queued", gpulabv1alpha1.JobSucceeded)
}

// TestClusterLostWhileRunning: the job's cluster deleted while its
// submitter runs is a failed attempt (ClusterLost): the submitter goes and
// the retry policy applies, here a fresh cluster.
func TestClusterLostWhileRunning(t *testing.T) {
	c, ns := setup(t, nil)
	j := newJob(ns, "lost")
	j.Spec.BackoffLimit = new(int32(1))
	if err := c.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	waitSubmitter(t, c, ns, "lost-submit-1")
	if err := c.Delete(context.Background(), testutil.GetCluster(t, c, ns, "lost-1")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, "the next attempt after ClusterLost", func() (bool, string) {
		got := getJob(t, c, ns, "lost")
		return got.Status.Attempts == 2 && got.Status.Failures == 1, fmt.Sprintf("phase %s, attempts %d, failures %d", got.Status.Phase, got.Status.Attempts, got.Status.Failures)
	})
	testutil.Eventually(t, timeout, "the lost attempt's submitter deleted", func() (bool, string) {
		sub := &batchv1.Job{}
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "lost-submit-1"}, sub)
		return apierrors.IsNotFound(err) || !sub.DeletionTimestamp.IsZero(), fmt.Sprint(err)
	})
	var events corev1.EventList
	testutil.Eventually(t, timeout, "a ClusterLost event", func() (bool, string) {
		if err := c.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Reason == gpulabv1alpha1.ReasonClusterLost {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none ClusterLost", len(events.Items))
	})
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "lost-submit-2"), true)
	waitPhase(t, c, ns, "lost", gpulabv1alpha1.JobSucceeded)
}

// TestTTLDeleteNamesTheUID: the TTL delete carries the finished job's UID
// as a precondition, so a job re-created under the name since the cache
// was filled is never the one deleted.
func TestTTLDeleteNamesTheUID(t *testing.T) {
	traffic := testutil.NewTraffic()
	var mu sync.Mutex
	var deletes []string
	traffic.FailRequest = func(r *http.Request) bool {
		if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/gpujobs/") && r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			mu.Lock()
			deletes = append(deletes, string(body))
			mu.Unlock()
		}
		return false
	}
	c, ns := setup(t, traffic)
	j := newJob(ns, "brief")
	j.Spec.TTLSecondsAfterFinished = new(int32(0))
	if err := c.Create(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "brief-submit-1"), true)
	testutil.Eventually(t, timeout, "TTL deletes the job", func() (bool, string) {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "brief"}, &gpulabv1alpha1.GPUJob{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(deletes) == 0 {
		t.Fatal("no DELETE of the GPUJob seen")
	}
	for _, body := range deletes {
		if !strings.Contains(body, `"preconditions":{"uid":"`+string(j.UID)+`"`) {
			t.Errorf("DELETE without the job's UID as a precondition: %s", body)
		}
	}
}
