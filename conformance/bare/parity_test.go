package bare

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/gangtest"
)

// specOf is the bare gang of GPUCluster c's spec, field by field.
func specOf(c *gpulabv1alpha1.GPUCluster, overheads map[string]corev1.ResourceList) Spec {
	s := Spec{Queue: c.Spec.Scheduling.Queue, PriorityClassName: c.Spec.Scheduling.PriorityClassName,
		Head: c.Spec.Head.Template, HeadGPUs: c.Spec.Head.GPUs, Overheads: overheads}
	for _, g := range c.Spec.WorkerGroups {
		s.Groups = append(s.Groups, Group{Name: g.Name, Replicas: g.Replicas, MinReplicas: g.MinReplicas, GPUs: g.GPUs, Template: g.Template})
	}
	return s
}

// TestChildrenAreTheOperators: for gangtest's GPUCluster (init
// containers, a sidecar, a RuntimeClass's overhead, two worker groups, one
// elastic, GPUs by extended resource and by DRA, a priority class and a
// queue), the floor creates exactly what the gang builder makes of the
// spec: the operator's desired state is checked against the same
// gangtest.Want in operator/internal/controller/gpucluster, and its
// Volcano PodGroup against gang.VolcanoPodGroup in
// operator/internal/scheduler. If either side drifts, one of them fails.
func TestChildrenAreTheOperators(t *testing.T) {
	c := gangtest.Cluster()
	cm := Object(c.Name, nil, specOf(c, gangtest.Overheads()))
	cm.Namespace, cm.UID = c.Namespace, types.UID("uid-"+c.Name)
	ch, err := ChildrenOf(cm)
	if err != nil {
		t.Fatal(err)
	}
	want := gangtest.Want()
	// The floor keeps no sizing of its own: its PodGroup, checked below,
	// carries it.
	got := &gang.Objects{Pods: ch.Pods, Service: ch.Service, ClaimTemplates: ch.ClaimTemplates, Size: want.Size}
	for _, d := range gangtest.Diff(want, got) {
		t.Error(d)
	}
	wantPG := gang.VolcanoPodGroup(c, want.Size)
	pg := ch.PodGroup.DeepCopy()
	pg.OwnerReferences = nil
	if !equality.Semantic.DeepEqual(pg, wantPG) {
		t.Errorf("PodGroup %+v, want the builder's %+v", pg, wantPG)
	}
	if DesiredPods(cm) != len(want.Pods) {
		t.Errorf("the ConfigMap asks for %d pods, the gang has %d", DesiredPods(cm), len(want.Pods))
	}
}

// The conversion is the GPUCluster the operator is given, and a bare gang
// refuses what only the operator can resolve.
func TestSpecIsAGPUClustersSpec(t *testing.T) {
	c := gangtest.Cluster()
	got, err := specOf(c, nil).Cluster(c.Name, c.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	c.UID = ""
	if !equality.Semantic.DeepEqual(got, c) {
		t.Errorf("cluster %+v, want %+v", got, c)
	}
	c.Spec.WorkerGroups[0].GPUs = &gpulabv1alpha1.GPURequest{WholeNode: true}
	if _, err := specOf(c, nil).Cluster(c.Name, c.Namespace); err == nil || !strings.Contains(err.Error(), "wholeNode") {
		t.Errorf("a wholeNode request: %v", err)
	}
	cm := Object(c.Name, nil, specOf(c, nil))
	cm.Namespace, cm.UID = c.Namespace, "u"
	if _, err := ChildrenOf(cm); err == nil {
		t.Error("children of a wholeNode gang")
	}
}
