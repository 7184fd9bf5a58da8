package gpucluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/controller/gpucluster"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// TestProgressWritesAreCoalesced: pods of a gang that become Ready one by
// one change only the ready count until the last, so the operator writes
// status for them at most once per StatusCoalesce, while Ready is written
// at once with the scheduled time first seen. A lone progress change is
// still written, once the window has passed.
func TestProgressWritesAreCoalesced(t *testing.T) {
	c := needEnv(t)
	m := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	ns := testutil.NewNamespace(t, c)
	pods := createWithPods(t, c, ns, "steps", 4)
	for i := range pods {
		bind(t, c, &pods[i], fmt.Sprintf("h100-%d", i%4))
	}
	testutil.Eventually(t, waitTimeout, "Provisioning", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "steps")
		return got.Status.Phase == gpulabv1alpha1.ClusterProvisioning, fmt.Sprintf("phase %q", got.Status.Phase)
	})
	provisioned := time.Now()
	writesBefore := m.Traffic.Count("PUT gpuclusters/status")

	// One pod Ready: progress only, written once the window has passed.
	markReady(t, c, &pods[0])
	testutil.Eventually(t, waitTimeout, "1 Ready pod in status", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "steps")
		return got.Status.ReadyPods == 1, fmt.Sprintf("readyPods %d", got.Status.ReadyPods)
	})
	if since := time.Since(provisioned); since < gpucluster.DefaultStatusCoalesce-100*time.Millisecond {
		t.Errorf("a progress-only change was written %s after the previous write, inside the %s window", since, gpucluster.DefaultStatusCoalesce)
	}
	// Three more, back to back, then the last: the phase change to Ready
	// is written at once and carries the counts the window held back.
	for i := 1; i < 4; i++ {
		markReady(t, c, &pods[i])
	}
	markReady(t, c, &pods[4])
	testutil.Eventually(t, waitTimeout, "Ready", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "steps")
		return got.Status.Phase == gpulabv1alpha1.ClusterReady && got.Status.ReadyPods == 5,
			fmt.Sprintf("phase %q, readyPods %d", got.Status.Phase, got.Status.ReadyPods)
	})
	got := testutil.GetCluster(t, c, ns, "steps")
	if got.Status.ScheduledTime == nil || got.Status.ReadyTime == nil || got.Status.ScheduledTime.After(got.Status.ReadyTime.Time) ||
		got.Status.ScheduledTime.After(provisioned) {
		t.Errorf("scheduledTime %v, readyTime %v: both set, scheduled no later than Provisioning was seen (%v)",
			got.Status.ScheduledTime, got.Status.ReadyTime, provisioned)
	}
	if n := m.Traffic.Count("PUT gpuclusters/status") - writesBefore; n > 3 {
		t.Errorf("%d status writes for 5 pods turning Ready, want at most 3 (one progress write per window, and Ready)", n)
	}
}

// TestFastGangCostsOneStatusWrite: a new cluster's first status waits the
// coalescing window like progress, so a gang Ready within it is written
// once, Ready, with when it was first seen bound; a first status that is
// a verdict (it can never fit) is written at once. The window is a minute
// here so that the test does not race it.
func TestFastGangCostsOneStatusWrite(t *testing.T) {
	c := needEnv(t)
	ctx := t.Context()
	m := testutil.StartManager(t, env.Config, testutil.ManagerOptions{StatusCoalesce: time.Minute, FirstStatusDelay: time.Minute})
	ns := testutil.NewNamespace(t, c)
	pods := createWithPods(t, c, ns, "fast", 2)
	if n := m.Traffic.Count("PUT gpuclusters/status"); n != 0 {
		t.Errorf("%d status writes before any pod was bound, want none inside the window", n)
	}
	for i := range pods {
		bind(t, c, &pods[i], fmt.Sprintf("h100-%d", i))
	}
	for i := range pods {
		markReady(t, c, &pods[i])
	}
	testutil.Eventually(t, waitTimeout, "Ready", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "fast")
		return got.Status.Phase == gpulabv1alpha1.ClusterReady, fmt.Sprintf("phase %q", got.Status.Phase)
	})
	got := testutil.GetCluster(t, c, ns, "fast")
	if got.Status.ObservedGeneration != got.Generation || got.Status.ReadyPods != 3 || got.Status.ScheduledTime == nil ||
		got.Status.ReadyTime == nil || got.Status.ScheduledTime.After(got.Status.ReadyTime.Time) {
		t.Errorf("status %+v: want generation observed, 3 Ready pods, scheduled no later than Ready", got.Status)
	}
	if n := m.Traffic.Count("PUT gpuclusters/status"); n != 1 {
		t.Errorf("%d status writes for a gang Ready inside the window, want 1", n)
	}

	huge := testutil.NewCluster(ns, "huge", 2, 64)
	huge.Spec.Scheduling.Scheduler = gpulabv1alpha1.SchedulerDefault
	if err := c.Create(ctx, huge); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "Unschedulable written at once", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "huge")
		return got.Status.Phase == gpulabv1alpha1.ClusterUnschedulable, fmt.Sprintf("phase %q", got.Status.Phase)
	})
}

// createWithPods creates a cluster of workers × 1 GPU and a head, placed
// by the default scheduler (the test binds its pods), and returns its pods
// once they all exist.
func createWithPods(t *testing.T, c client.Client, ns, name string, workers int32) []corev1.Pod {
	t.Helper()
	gc := testutil.NewCluster(ns, name, workers, 1)
	gc.Spec.Scheduling.Scheduler = gpulabv1alpha1.SchedulerDefault
	if err := c.Create(t.Context(), gc); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	testutil.Eventually(t, waitTimeout, fmt.Sprintf("%d pods", workers+1), func() (bool, string) {
		pods = testutil.ListPods(t, c, ns)
		return len(pods) == int(workers)+1, fmt.Sprintf("%d pods", len(pods))
	})
	return pods
}

func bind(t *testing.T, c client.Client, pod *corev1.Pod, node string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := c.SubResource("binding").Create(context.Background(), pod, b); err != nil {
		t.Fatal(err)
	}
}

func markReady(t *testing.T, c client.Client, pod *corev1.Pod) {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// TestAGangCostsItsChildrenAndOneStatusWrite: a Volcano gang of a head and
// two workers, Ready inside the first-status delay, costs its five
// creates (Service, PodGroup, three pods) and the one status write that
// says Ready: no progress write and no event for its first pods, which
// were one write each in a burst of hundreds.
func TestAGangCostsItsChildrenAndOneStatusWrite(t *testing.T) {
	c := needEnv(t)
	m := testutil.StartManager(t, env.Config, testutil.ManagerOptions{FirstStatusDelay: time.Minute})
	ns := testutil.NewNamespace(t, c)
	gc := testutil.NewCluster(ns, "six", 2, 1)
	if err := c.Create(t.Context(), gc); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	testutil.Eventually(t, waitTimeout, "3 pods", func() (bool, string) {
		pods = testutil.ListPods(t, c, ns)
		return len(pods) == 3, fmt.Sprintf("%d pods", len(pods))
	})
	for i := range pods {
		bind(t, c, &pods[i], fmt.Sprintf("h100-%d", i))
		markReady(t, c, &pods[i])
	}
	testutil.Eventually(t, waitTimeout, "Ready", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "six")
		return got.Status.Phase == gpulabv1alpha1.ClusterReady, fmt.Sprintf("phase %q", got.Status.Phase)
	})
	writes := 0
	for key, n := range m.Traffic.Snapshot() {
		switch key {
		case "POST services", "POST podgroups", "POST pods", "PUT gpuclusters/status":
		case "POST events", "PATCH events":
			t.Errorf("%d %s: a gang's first pods are no event", n, key)
		default:
			// Writes of other objects (the operator's own, not the gang's)
			// are not this gang's cost.
			continue
		}
		writes += n
	}
	if writes != 6 {
		t.Errorf("writes %v: want 6 for the gang (5 creates, 1 status write)", m.Traffic.Snapshot())
	}
}
