package local

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A node kube-controller-manager still taints not-ready (it removes the
// taint a moment after the node turns Ready, later under load) is not
// ready: the suite would leave it out of its footprint, and runs at the
// same scale would measure different numbers of gangs.
func TestNodeReadyWaitsForTheLifecycleTaints(t *testing.T) {
	ready := corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if !nodeReady(&ready) {
		t.Fatal("a Ready node without taints is not ready")
	}
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		n := ready.DeepCopy()
		n.Spec.Taints = []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}}
		if nodeReady(n) {
			t.Errorf("a Ready node tainted %s is ready", key)
		}
	}
	gpuTainted := ready.DeepCopy()
	gpuTainted.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
	if !nodeReady(gpuTainted) {
		t.Error("a node's own GPU taint makes it not ready")
	}
}
