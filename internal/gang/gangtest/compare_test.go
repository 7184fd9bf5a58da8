package gangtest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpulab/gpulab/internal/gang"
)

// Diff is what the parity tests of the operator and the floor rest on: it
// must see every kind of drift, and only owner references pass.
func TestDiffSeesDrift(t *testing.T) {
	if d := Diff(Want(), Want()); len(d) != 0 {
		t.Fatalf("one build differs from another: %v", d)
	}
	owned := Want()
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "train", UID: "u"}}
	for _, p := range owned.Pods {
		p.OwnerReferences = owner
	}
	owned.Service.OwnerReferences = owner
	owned.ClaimTemplates[0].OwnerReferences = owner
	if d := Diff(Want(), owned); len(d) != 0 {
		t.Errorf("owner references count as drift: %v", d)
	}
	reversed := Want()
	for i, j := 0, len(reversed.Pods)-1; i < j; i, j = i+1, j-1 {
		reversed.Pods[i], reversed.Pods[j] = reversed.Pods[j], reversed.Pods[i]
	}
	if d := Diff(Want(), reversed); len(d) != 0 {
		t.Errorf("pod order counts as drift: %v", d)
	}

	for name, drift := range map[string]func(*corev1.Pod, *gang.Objects){
		"pod label":    func(p *corev1.Pod, _ *gang.Objects) { p.Labels["x"] = "y" },
		"scheduler":    func(p *corev1.Pod, _ *gang.Objects) { p.Spec.SchedulerName = "default-scheduler" },
		"priority":     func(p *corev1.Pod, _ *gang.Objects) { p.Spec.PriorityClassName = "" },
		"missing pod":  func(_ *corev1.Pod, o *gang.Objects) { o.Pods = o.Pods[:len(o.Pods)-1] },
		"service port": func(_ *corev1.Pod, o *gang.Objects) { o.Service.Spec.Ports = nil },
		"claim count": func(_ *corev1.Pod, o *gang.Objects) {
			o.ClaimTemplates[0].Spec.Spec.Devices.Requests[0].Exactly.Count = 1
		},
		"no claims":     func(_ *corev1.Pod, o *gang.Objects) { o.ClaimTemplates = nil },
		"minMember":     func(_ *corev1.Pod, o *gang.Objects) { o.Size.MinMember-- },
		"minResources":  func(_ *corev1.Pod, o *gang.Objects) { delete(o.Size.MinResources, corev1.ResourceMemory) },
		"minTaskMember": func(_ *corev1.Pod, o *gang.Objects) { o.Size.MinTaskMember["extra"] = 2 },
	} {
		got := Want()
		drift(got.Pods[1], got)
		if d := Diff(Want(), got); len(d) == 0 {
			t.Errorf("%s: no difference found", name)
		}
	}
}
