package gangtest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"

	"github.com/gpulab/gpulab/internal/gang"
)

// Want is what the gang builder makes of Cluster with Overheads: the
// objects every caller must create for it.
func Want() *gang.Objects {
	c := Cluster()
	return gang.Build(c, gang.Groups(c), Overheads())
}

// Diff lists how got differs from want, object by object, leaving out
// owner references (each caller sets its own controller); nothing when
// they are the same objects. Pods are matched by name, whatever their
// order.
func Diff(want, got *gang.Objects) []string {
	var out []string
	same := func(what string, w, g any) {
		if !equality.Semantic.DeepEqual(w, g) {
			out = append(out, fmt.Sprintf("%s differs (- want, + got):\n%s", what, diff.Diff(w, g)))
		}
	}
	wantPods, gotPods := podsByName(want.Pods), podsByName(got.Pods)
	for name, w := range wantPods {
		if gotPods[name] == nil {
			out = append(out, "pod "+name+" is missing")
			continue
		}
		same("pod "+name, w, gotPods[name])
	}
	for name := range gotPods {
		if wantPods[name] == nil {
			out = append(out, "pod "+name+" is not wanted")
		}
	}
	same("head Service", serviceWithoutOwners(want.Service), serviceWithoutOwners(got.Service))
	if len(want.ClaimTemplates) != len(got.ClaimTemplates) {
		out = append(out, fmt.Sprintf("%d ResourceClaimTemplates, want %d", len(got.ClaimTemplates), len(want.ClaimTemplates)))
	} else {
		for i, w := range want.ClaimTemplates {
			same("ResourceClaimTemplate "+w.Name, claimTemplateWithoutOwners(w), claimTemplateWithoutOwners(got.ClaimTemplates[i]))
		}
	}
	same("gang size", want.Size, got.Size)
	return out
}

func podsByName(pods []*corev1.Pod) map[string]*corev1.Pod {
	m := map[string]*corev1.Pod{}
	for _, p := range pods {
		p = p.DeepCopy()
		p.OwnerReferences = nil
		m[p.Name] = p
	}
	return m
}

func serviceWithoutOwners(s *corev1.Service) *corev1.Service {
	if s == nil {
		return nil
	}
	s = s.DeepCopy()
	s.OwnerReferences = nil
	return s
}

func claimTemplateWithoutOwners(t *resourceapi.ResourceClaimTemplate) *resourceapi.ResourceClaimTemplate {
	if t == nil {
		return nil
	}
	t = t.DeepCopy()
	t.OwnerReferences = nil
	return t
}
