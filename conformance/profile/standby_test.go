package profile

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func operatorPod(name, hash string, ready bool, labels map[string]string) corev1.Pod {
	l := map[string]string{"pod-template-hash": hash}
	for k, v := range labels {
		l[k] = v
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}

// TestReadyStandbys: only a Ready replica of the leader's own workload
// (any ReplicaSet of it) can take over; an unready one, one being deleted
// or another workload's pod cannot.
func TestReadyStandbys(t *testing.T) {
	app := map[string]string{"app.kubernetes.io/name": "gpulab", "app.kubernetes.io/component": "operator"}
	leader := operatorPod("op-a", "h1", true, app)
	deleting := operatorPod("op-d", "h1", true, app)
	deleting.DeletionTimestamp = &metav1.Time{}
	pods := []corev1.Pod{
		leader,
		operatorPod("op-b", "h1", false, app),
		deleting,
		operatorPod("agent", "h1", true, map[string]string{"app.kubernetes.io/name": "gpulab", "app.kubernetes.io/component": "agent"}),
	}
	if got := ReadyStandbys(&leader, pods); len(got) != 0 {
		t.Errorf("standbys %v, want none: the only other replica is not Ready", got)
	}
	pods = append(pods, operatorPod("op-c", "h2", true, app))
	if got := ReadyStandbys(&leader, pods); !slices.Equal(got, []string{"op-c"}) {
		t.Errorf("standbys %v, want op-c (a Ready replica of a newer ReplicaSet)", got)
	}
	bare := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}
	if got := ReadyStandbys(&bare, append(pods, bare)); len(got) != 0 {
		t.Errorf("a leader without labels: standbys %v, want none", got)
	}
}
