package gpucluster_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/controller/gpucluster"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// TestOnlyTheLastReadyPodTurnsTheGang: a pod turning Ready goes ahead of
// queued work only when it makes its gang whole, as the cache has the
// gang's pods (read through the operator's index); the earlier ones, and a binding, are progress. Readiness
// lost and a deletion begun turn the verdict.
func TestOnlyTheLastReadyPodTurnsTheGang(t *testing.T) {
	c := needEnv(t)
	ctx := t.Context()
	ns := testutil.NewNamespace(t, c)
	gc := testutil.NewCluster(ns, "turns", 1, 1)
	if err := c.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for _, name := range []string{"turns-head", "turns-workers-0"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{gpulabv1alpha1.ClusterLabel: gc.Name}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		if err := controllerutil.SetControllerReference(gc, pod, c.Scheme()); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod)
	}
	turned, cached, err := gpucluster.PodTurned(ctx, env.Config, c.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	// seen waits until the cache holds pod as the API does.
	seen := func(pod *corev1.Pod) {
		t.Helper()
		testutil.Eventually(t, waitTimeout, "the cache to see "+pod.Name, func() (bool, string) {
			got := &corev1.Pod{}
			err := cached.Get(ctx, client.ObjectKeyFromObject(pod), got)
			return err == nil && got.ResourceVersion == pod.ResourceVersion, fmt.Sprintf("%v", err)
		})
	}
	// readyNow marks pod Running and Ready in the API and returns the
	// update the informer would deliver.
	readyNow := func(pod *corev1.Pod) event.UpdateEvent {
		t.Helper()
		was := pod.DeepCopy()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		return event.UpdateEvent{ObjectOld: was, ObjectNew: pod.DeepCopy()}
	}
	first := readyNow(pods[0])
	seen(pods[0])
	if turned(ctx, first) {
		t.Error("the first of two pods turning Ready turned the gang")
	}
	last := readyNow(pods[1])
	seen(pods[1])
	if !turned(ctx, last) {
		t.Error("the pod that made the gang whole did not turn it")
	}

	notReady := pods[1].DeepCopy()
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	deleting := pods[1].DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	unbound := pods[1].DeepCopy()
	unbound.Spec.NodeName = ""
	for _, tc := range []struct {
		what     string
		was, now *corev1.Pod
		want     bool
	}{
		{"readiness lost", pods[1], notReady, true},
		{"deletion begun", pods[1], deleting, true},
		{"bound", unbound, pods[1], false},
	} {
		if got := turned(ctx, event.UpdateEvent{ObjectOld: tc.was, ObjectNew: tc.now}); got != tc.want {
			t.Errorf("%s: turned %v, want %v", tc.what, got, tc.want)
		}
	}
}
