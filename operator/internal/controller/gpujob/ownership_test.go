package gpujob_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// conflictTimeout covers the job's recheck of a name conflict (15 s) twice.
const conflictTimeout = 45 * time.Second

func waitConflict(t *testing.T, c client.Client, ns, name string, parts ...string) {
	t.Helper()
	testutil.Eventually(t, conflictTimeout, "job "+name+" to report a NameConflict", func() (bool, string) {
		j := getJob(t, c, ns, name)
		cond := meta.FindStatusCondition(j.Status.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != gpulabv1alpha1.ReasonNameConflict {
			return false, fmt.Sprintf("phase %s, conditions %+v", j.Status.Phase, j.Status.Conditions)
		}
		for _, p := range parts {
			if !strings.Contains(cond.Message, p) {
				return false, fmt.Sprintf("message %q lacks %q", cond.Message, p)
			}
		}
		return true, ""
	})
	testutil.Eventually(t, timeout, "a NameConflict event", func() (bool, string) {
		var events eventsv1.EventList
		if err := c.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Reason == gpulabv1alpha1.ReasonNameConflict && e.Regarding.Name == name && strings.Contains(e.Note, parts[0]) {
				return true, ""
			}
		}
		return false, "no event yet"
	})
}

// TestForeignClusterIsNeverUsedOrDeleted pre-creates the GPUCluster name a
// job's first attempt wants: the job reports the conflict, never runs on
// that cluster, and when its deadline fails it, deletes nothing.
func TestForeignClusterIsNeverUsedOrDeleted(t *testing.T) {
	c, ns := setup(t, nil)
	ctx := context.Background()
	theirs := testutil.NewCluster(ns, "train-1", 1, 1)
	if err := c.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	j := newJob(ns, "train")
	j.Spec.ActiveDeadlineSeconds = new(int64(5))
	if err := c.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	waitConflict(t, c, ns, "train", "GPUCluster train-1", "no controller")
	got := waitPhase(t, c, ns, "train", gpulabv1alpha1.JobFailed)
	if cond := meta.FindStatusCondition(got.Status.Conditions, gpulabv1alpha1.ConditionFailed); cond == nil || cond.Reason != gpulabv1alpha1.ReasonDeadlineExceeded {
		t.Errorf("Failed condition %+v, want DeadlineExceeded", cond)
	}
	// The deadline's cleanup (DeleteCluster) ran with the Failed verdict.
	gc := testutil.GetCluster(t, c, ns, "train-1")
	if gc.UID != theirs.UID || !gc.DeletionTimestamp.IsZero() || len(gc.OwnerReferences) != 0 || gc.Spec.Suspend {
		t.Errorf("the foreign cluster was touched: uid %s (was %s), deleting %v, owners %v, suspend %v",
			gc.UID, theirs.UID, gc.DeletionTimestamp, gc.OwnerReferences, gc.Spec.Suspend)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train-submit-1"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("a submitter ran on a cluster the job does not own: %v", err)
	}
}

// TestForeignSubmitterIsNeverAdopted pre-creates the submitter Job name:
// the job reports the conflict and leaves it alone.
func TestForeignSubmitterIsNeverAdopted(t *testing.T) {
	c, ns := setup(t, nil)
	ctx := context.Background()
	theirs := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sub-submit-1"},
		Spec:       batchv1.JobSpec{Suspend: new(true), Template: testutil.PodTemplate("theirs", nil)},
	}
	theirs.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := c.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, newJob(ns, "sub")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timeout, "the cluster to be Ready", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		j := getJob(t, c, ns, "sub")
		return j.Status.ClusterReadyTime != nil, string(j.Status.Phase)
	})
	waitConflict(t, c, ns, "sub", "Job sub-submit-1", "no controller")
	got := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), got); err != nil {
		t.Fatal(err)
	}
	if got.UID != theirs.UID || len(got.OwnerReferences) != 0 || !got.DeletionTimestamp.IsZero() {
		t.Errorf("the foreign Job was touched: uid %s (was %s), owners %v", got.UID, theirs.UID, got.OwnerReferences)
	}
	if j := getJob(t, c, ns, "sub"); j.Status.SubmitTime != nil || j.Status.Phase == gpulabv1alpha1.JobSucceeded {
		t.Errorf("the job treats a foreign Job as its submitter: %+v", j.Status)
	}
}

// TestDeletedSubmitterIsAFailedAttempt deletes a running submitter: the
// attempt counts as failed and the next one starts under a new name; the
// deleted one never runs again.
func TestDeletedSubmitterIsAFailedAttempt(t *testing.T) {
	c, ns := setup(t, nil)
	ctx := context.Background()
	j := newJob(ns, "gone")
	j.Spec.BackoffLimit = new(int32(1))
	j.Spec.RetryPolicy = gpulabv1alpha1.RetryReuseCluster
	if err := c.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	first := waitSubmitter(t, c, ns, "gone-submit-1")
	// As kubectl deletes: in the background (envtest runs no garbage
	// collector, so the Job is gone at once).
	if err := c.Delete(ctx, first, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	waitSubmitter(t, c, ns, "gone-submit-2")
	got := getJob(t, c, ns, "gone")
	if got.Status.Attempts != 2 || got.Status.Failures != 1 {
		t.Errorf("attempts %d, failures %d after a deleted submitter; want 2 and 1", got.Status.Attempts, got.Status.Failures)
	}
	again := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(first), again); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted submitter was created again (uid %s, was %s): %v", again.UID, first.UID, err)
	}

	// The second deletion exhausts backoffLimit: the job fails and says why.
	// With batch/v1's default propagation the Job only gets a deletion
	// timestamp (the orphan finalizer waits for the garbage collector):
	// being deleted counts too.
	if err := c.Delete(ctx, waitSubmitter(t, c, ns, "gone-submit-2")); err != nil {
		t.Fatal(err)
	}
	failed := waitPhase(t, c, ns, "gone", gpulabv1alpha1.JobFailed)
	cond := meta.FindStatusCondition(failed.Status.Conditions, gpulabv1alpha1.ConditionFailed)
	if cond == nil || cond.Reason != gpulabv1alpha1.ReasonBackoffLimitExceeded || !strings.Contains(cond.Message, "was deleted before it finished") {
		t.Errorf("Failed condition %+v, want BackoffLimitExceeded naming the deleted submitter", cond)
	}
}

// TestKeptClusterOutlivesTTL: KeepCluster with ttlSecondsAfterFinished
// deletes the job but not the cluster, which must no longer be owned by the
// job (the garbage collector, absent from envtest, would delete it).
func TestKeptClusterOutlivesTTL(t *testing.T) {
	c, ns := setup(t, nil)
	ctx := context.Background()
	j := newJob(ns, "kept")
	j.Spec.CleanupPolicy = gpulabv1alpha1.CleanupKeepCluster
	j.Spec.TTLSecondsAfterFinished = new(int32(1))
	if err := c.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	finishSubmitter(t, c, waitSubmitter(t, c, ns, "kept-submit-1"), true)
	testutil.Eventually(t, timeout, "TTL deletes the job", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, &gpulabv1alpha1.GPUJob{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	gc := testutil.GetCluster(t, c, ns, "kept-1")
	for _, ref := range gc.OwnerReferences {
		if ref.Kind == "GPUJob" {
			t.Errorf("the kept cluster is still owned by the deleted job (%s %s): garbage collection would delete it", ref.Kind, ref.Name)
		}
	}
	if !gc.DeletionTimestamp.IsZero() || gc.Spec.Suspend {
		t.Errorf("the kept cluster is being deleted or suspended")
	}
}
