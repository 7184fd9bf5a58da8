package gpucluster

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/gangtest"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/operator/internal/capacity"
	"github.com/gpulab/gpulab/operator/internal/scheduler"
)

func testCluster(workers int32) *gpulabv1alpha1.GPUCluster {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "sidecar", Image: "envoy"},
		{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}},
	}}}
	tmpl.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
		},
	}}}
	return &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Head: gpulabv1alpha1.HeadSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "head", Image: "trainer"}}}}},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{
				Name: "w", Replicas: workers,
				GPUs:     &gpulabv1alpha1.GPURequest{PerPod: new(int32(8)), Product: "NVIDIA-H100-80GB-HBM3", MinMemoryMiB: new(int64(80000)), Container: "train"},
				Template: tmpl,
			}},
			Scheduling: gpulabv1alpha1.SchedulingSpec{Scheduler: gpulabv1alpha1.SchedulerVolcano, Queue: "default"},
		},
	}
}

func fleet(n int) []capacity.Node {
	nodes := make([]capacity.Node, n)
	for i := range nodes {
		nodes[i] = capacity.Node{Name: fmt.Sprintf("n%d", i), Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559, Healthy: 8}
	}
	return nodes
}

func TestBuildPodPlacesGPUsWhereAsked(t *testing.T) {
	d := buildDesired(testCluster(2), fleet(2), nil, scheduler.Volcano{}, nil)
	if len(d.pods) != 3 || d.pods["c-head"] == nil || d.pods["c-w-1"] == nil {
		t.Fatalf("pods %v, want c-head, c-w-0, c-w-1", keys(d.pods))
	}
	w := d.pods["c-w-1"]
	if gpus := w.Spec.Containers[1].Resources.Limits[gfd.GPUResource]; gpus.Value() != 8 {
		t.Errorf("train container has %s GPUs, want 8", gpus.String())
	}
	if _, ok := w.Spec.Containers[0].Resources.Limits[gfd.GPUResource]; ok {
		t.Errorf("the sidecar got GPUs")
	}
	terms := w.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 2 {
		t.Fatalf("%d node selector terms, want the template's 2", len(terms))
	}
	for _, term := range terms {
		// zone, product and memory must all hold in each ORed term.
		if len(term.MatchExpressions) != 3 || term.MatchExpressions[2].Operator != corev1.NodeSelectorOpGt || term.MatchExpressions[2].Values[0] != "79999" {
			t.Errorf("term %+v lacks the product and memory requirements", term)
		}
	}
	if w.Labels[gpulabv1alpha1.IndexLabel] != "1" || w.Spec.Hostname != "c-w-1" {
		t.Errorf("labels %v hostname %q", w.Labels, w.Spec.Hostname)
	}
	if !d.verdict.Fits || d.gang.MinMember != 3 {
		t.Errorf("verdict %+v, minMember %d", d.verdict, d.gang.MinMember)
	}
	// The template must be untouched: pods are built from copies.
	if len(testCluster(2).Spec.WorkerGroups[0].Template.Spec.Containers[1].Resources.Limits) != 0 {
		t.Errorf("template mutated")
	}
}

// TestDesiredIsTheGangBuilders: the operator's desired state for a
// cluster is exactly what the gang builder makes of its spec, the objects
// conformance/bare creates for the same spec (its own test checks that
// half against the same gangtest.Want): nothing added, nothing left out.
func TestDesiredIsTheGangBuilders(t *testing.T) {
	c := gangtest.Cluster()
	d := buildDesired(c, fleet(4), gangtest.Overheads(), scheduler.For(c.Spec.Scheduling.Scheduler), nil)
	got := &gang.Objects{Service: d.service, ClaimTemplates: d.claimTemplates, Size: d.gang}
	for _, p := range d.pods {
		got.Pods = append(got.Pods, p)
	}
	for _, diff := range gangtest.Diff(gangtest.Want(), got) {
		t.Error(diff)
	}
	if len(d.groups) != 3 || d.groups[1].GPUsPerPod != 4 || d.groups[2].GPUsPerPod != 2 {
		t.Errorf("groups %+v, want head, workers of 4 GPUs, extra of 2", d.groups)
	}
}

func keys(m map[string]*corev1.Pod) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// BenchmarkBuildDesired measures desired-state computation for a 1+128 pod
// cluster on a 16-node fleet.
func BenchmarkBuildDesired(b *testing.B) {
	cluster := testCluster(128)
	nodes := fleet(16)
	b.ReportAllocs()
	for b.Loop() {
		_ = buildDesired(cluster, nodes, nil, scheduler.Volcano{}, nil)
	}
}
