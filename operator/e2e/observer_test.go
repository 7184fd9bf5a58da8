package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// gangPods is a gang of three pods, the first `bound` of them on a node.
func gangPods(gang string, bound int) []corev1.Pod {
	pods := make([]corev1.Pod, 3)
	for i := range pods {
		pods[i].Name = gang + "-" + string(rune('a'+i))
		pods[i].UID = types.UID(pods[i].Name)
		pods[i].Labels = map[string]string{gpulabv1alpha1.ClusterLabel: gang}
		if i < bound {
			pods[i].Spec.NodeName = "node"
		}
	}
	return pods
}

func TestObserverTimesPartialBindingFromTheEndOfTheRestarts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	o := newGangObserver()
	o.observe(gangPods("g", 1), t0)
	o.restarting()
	// However long the restarts take, a gang partly bound across them is
	// not reported while they run...
	o.observe(gangPods("g", 1), t0.Add(time.Minute))
	o.restartsDone(t0.Add(time.Minute))
	// ...and gets partialLimit from their end.
	o.observe(gangPods("g", 1), t0.Add(time.Minute+partialLimit-time.Second))
	if v := o.violations(); len(v) != 0 {
		t.Fatalf("reported within partialLimit of the restarts' end: %v", v)
	}
	o.observe(gangPods("g", 1), t0.Add(time.Minute+partialLimit+time.Second))
	if v := o.violations(); len(v) != 1 {
		t.Fatalf("violations = %v, want one for gang g partly bound past partialLimit after the restarts", v)
	}
}

func TestObserverReportsAGangPartlyBoundPastTheLimit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	o := newGangObserver()
	o.restarting()
	o.restartsDone(t0)
	o.observe(gangPods("g", 2), t0.Add(time.Second))
	o.observe(gangPods("h", 3), t0.Add(time.Second))
	o.observe(gangPods("g", 2), t0.Add(2*time.Second+partialLimit))
	if v := o.violations(); len(v) != 1 {
		t.Fatalf("violations = %v, want one for gang g", v)
	}
	// A whole gang resets its clock.
	o.observe(gangPods("g", 3), t0.Add(3*time.Second+partialLimit))
	o.observe(gangPods("g", 1), t0.Add(4*time.Second+partialLimit))
	o.observe(gangPods("g", 1), t0.Add(5*time.Second+partialLimit))
	if v := o.violations(); len(v) != 1 {
		t.Fatalf("violations = %v, want still one", v)
	}
	if got := o.longestPartial(); got != partialLimit+time.Second {
		t.Errorf("longest partial = %s, want %s (gang g's first span)", got, partialLimit+time.Second)
	}
}
