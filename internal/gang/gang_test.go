package gang_test

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/gangtest"
	"github.com/gpulab/gpulab/internal/gfd"
)

func build(t *testing.T) (*gpulabv1alpha1.GPUCluster, *gang.Objects) {
	t.Helper()
	c := gangtest.Cluster()
	return c, gang.Build(c, gang.Groups(c), gangtest.Overheads())
}

func TestGroupsFromTheSpec(t *testing.T) {
	groups := gang.Groups(gangtest.Cluster())
	type shape struct {
		name                string
		replicas, min, gpus int32
	}
	var got []shape
	for _, g := range groups {
		got = append(got, shape{g.Name, g.Replicas, g.Min, g.GPUsPerPod})
	}
	want := []shape{{"head", 1, 1, 0}, {"workers", 3, 3, 4}, {"extra", 2, 1, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("groups %+v, want %+v", got, want)
	}
	c := gangtest.Cluster()
	c.Spec.WorkerGroups[0].GPUs = &gpulabv1alpha1.GPURequest{WholeNode: true}
	if n := gang.Groups(c)[1].GPUsPerPod; n != 0 {
		t.Errorf("wholeNode resolved to %d without a fleet; the caller resolves it", n)
	}
}

// The gang's sizing counts every needed pod as built: the head's init
// phase, the workers' sidecar in both phases and their RuntimeClass's
// overhead, limits standing in for requests, and only the needed extra.
func TestBuildSizesThePodsAsBuilt(t *testing.T) {
	_, objs := build(t)
	s := objs.Size
	if s.MinMember != 5 {
		t.Errorf("minMember %d, want 5 (head, 3 workers, 1 of 2 extra)", s.MinMember)
	}
	if want := map[string]int32{"head": 1, "workers": 3, "extra": 1}; !reflect.DeepEqual(s.MinTaskMember, want) {
		t.Errorf("minTaskMember %v, want %v", s.MinTaskMember, want)
	}
	if want := map[string]int32{"head": 1, "workers": 3, "extra": 2}; !reflect.DeepEqual(s.TaskCount, want) {
		t.Errorf("taskCount %v, want %v", s.TaskCount, want)
	}
	// head: max(app 1 CPU, init 4) CPU, 2Gi; a worker: max(app 0.1+2+0.5
	// sidecar, init 3+0.5) + 0.25 overhead = 3.75 CPU, 8Gi+64Mi+160Mi, 4
	// GPUs; an extra: its limits, 1 CPU and 4Gi, GPUs claimed (not here).
	want := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16250m"), corev1.ResourceMemory: resource.MustParse("31392Mi"),
		gfd.GPUResource: resource.MustParse("12")}
	if len(s.MinResources) != len(want) {
		t.Errorf("minResources %v, want %v", s.MinResources, want)
	}
	for name, q := range want {
		if got := s.MinResources[name]; got.Cmp(q) != 0 {
			t.Errorf("minResources[%s] = %s, want %s", name, got.String(), q.String())
		}
	}
}

func TestBuildPods(t *testing.T) {
	c, objs := build(t)
	var names []string
	for _, p := range objs.Pods {
		names = append(names, p.Name)
	}
	if want := []string{"train-head", "train-workers-0", "train-workers-1", "train-workers-2", "train-extra-0", "train-extra-1"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("pods %v, want %v", names, want)
	}
	for _, p := range objs.Pods {
		if p.Namespace != "lab" || p.Spec.Hostname != p.Name || p.Spec.PriorityClassName != "high" || p.Spec.SchedulerName != gang.VolcanoSchedulerName {
			t.Errorf("%s: namespace %q hostname %q priority %q scheduler %q", p.Name, p.Namespace, p.Spec.Hostname, p.Spec.PriorityClassName, p.Spec.SchedulerName)
		}
		if p.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey] != "train-pg" || p.Annotations[gang.TaskAnnotation] != p.Labels[gpulabv1alpha1.GroupLabel] ||
			p.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] != gpulabv1alpha1.PodTemplateHash(withoutHash(p)) {
			t.Errorf("%s: annotations %v", p.Name, p.Annotations)
		}
		if p.Labels["team"] == "" && p.Labels[gpulabv1alpha1.GroupLabel] != "extra" {
			t.Errorf("%s: the template's labels are lost: %v", p.Name, p.Labels)
		}
	}
	head := objs.Pods[0]
	if head.Annotations["note"] != "rank0" || head.Labels[gpulabv1alpha1.IndexLabel] != "0" {
		t.Errorf("head annotations %v labels %v", head.Annotations, head.Labels)
	}
	w := objs.Pods[2]
	if q := w.Spec.Containers[1].Resources.Limits[gfd.GPUResource]; q.Value() != 4 {
		t.Errorf("train container has %s GPUs, want 4", q.String())
	}
	if _, ok := w.Spec.Containers[0].Resources.Requests[gfd.GPUResource]; ok {
		t.Error("the log container got GPUs")
	}
	if w.Spec.Overhead != nil {
		t.Error("a pod carries its overhead: the API server would reject it")
	}
	env := map[string]string{}
	for _, e := range w.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[gpulabv1alpha1.EnvHeadAddress] != "train-head.lab.svc" || env[gpulabv1alpha1.EnvIndex] != "1" || env[gpulabv1alpha1.EnvGroup] != "workers" || env[gpulabv1alpha1.EnvClusterName] != "train" {
		t.Errorf("env %v", env)
	}
	terms := w.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 || terms[0].MatchExpressions[1].Values[0] != "79999" {
		t.Errorf("node affinity %+v, want the product and more than 79999 MiB", terms)
	}
	if w.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] == objs.Pods[1].Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] {
		t.Error("two pods of one group with one hash")
	}
	x := objs.Pods[4]
	if len(x.Spec.ResourceClaims) != 1 || *x.Spec.ResourceClaims[0].ResourceClaimTemplateName != "train-extra-gpus" ||
		len(x.Spec.Containers[0].Resources.Claims) != 1 {
		t.Errorf("extra pod claims %+v / %+v", x.Spec.ResourceClaims, x.Spec.Containers[0].Resources.Claims)
	}
	if _, ok := x.Spec.Containers[0].Resources.Limits[gfd.GPUResource]; ok {
		t.Error("a DRA pod asks for nvidia.com/gpu too")
	}
	// Building never touches the spec: pods are built from copies.
	if !reflect.DeepEqual(c, gangtest.Cluster()) {
		t.Error("Build changed the cluster")
	}
	_, again := build(t)
	if !reflect.DeepEqual(again, objs) {
		t.Error("two builds of one spec differ")
	}
}

// withoutHash is p as it was hashed: without the hash, and without the
// disruption annotations added after it.
func withoutHash(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	delete(p.Annotations, gpulabv1alpha1.PodTemplateHashAnnotation)
	delete(p.Annotations, gang.DoNotDisruptAnnotation)
	delete(p.Annotations, gang.SafeToEvictAnnotation)
	return p
}

// TestPodsAskAutoscalersNotToEvictThem: every member carries Karpenter's
// and cluster-autoscaler's no-disruption annotations, outside the
// template hash (so pods made before them are not rolled out again), and
// a template's own value wins.
func TestPodsAskAutoscalersNotToEvictThem(t *testing.T) {
	c, objs := build(t)
	for _, p := range objs.Pods {
		if p.Annotations[gang.DoNotDisruptAnnotation] != "true" || p.Annotations[gang.SafeToEvictAnnotation] != "false" {
			t.Errorf("%s: annotations %v, want %s=true and %s=false", p.Name, p.Annotations, gang.DoNotDisruptAnnotation, gang.SafeToEvictAnnotation)
		}
	}
	before := objs.Pods[0].Annotations[gpulabv1alpha1.PodTemplateHashAnnotation]
	c.Spec.Head.Template.Annotations[gang.SafeToEvictAnnotation] = "true"
	head := gang.BuildPod(c, &gang.Groups(c)[0], 0)
	if head.Annotations[gang.SafeToEvictAnnotation] != "true" {
		t.Errorf("the template's %s=true was overwritten: %v", gang.SafeToEvictAnnotation, head.Annotations)
	}
	if head.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] == before {
		t.Error("a template annotation the user set did not change the template hash")
	}
}

func TestBuildClaimTemplatesAndService(t *testing.T) {
	_, objs := build(t)
	if len(objs.ClaimTemplates) != 1 {
		t.Fatalf("%d claim templates, want the extra group's", len(objs.ClaimTemplates))
	}
	ct := objs.ClaimTemplates[0]
	req := ct.Spec.Spec.Devices.Requests
	if ct.Name != "train-extra-gpus" || ct.Namespace != "lab" || ct.Labels[gpulabv1alpha1.GroupLabel] != "extra" ||
		len(req) != 1 || req[0].Exactly == nil || req[0].Exactly.Count != 2 || req[0].Exactly.DeviceClassName != "gpu.gpulab.io" ||
		len(req[0].Exactly.Selectors) != 1 {
		t.Errorf("claim template %+v", ct)
	}
	svc := objs.Service
	if svc.Name != "train-head" || svc.Namespace != "lab" || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses ||
		svc.Spec.Selector[gpulabv1alpha1.GroupLabel] != "head" || svc.Spec.Selector[gpulabv1alpha1.ClusterLabel] != "train" || len(svc.Spec.Ports) != 2 {
		t.Errorf("head Service %+v", svc)
	}
}

// An empty group still has a task: it sizes as Min 0 and builds no pod.
func TestBuildEmptyGroup(t *testing.T) {
	c := gangtest.Cluster()
	c.Spec.WorkerGroups[1].Replicas, c.Spec.WorkerGroups[1].MinReplicas = 0, nil
	objs := gang.Build(c, gang.Groups(c), gangtest.Overheads())
	if len(objs.Pods) != 4 || objs.Size.MinMember != 4 || objs.Size.TaskCount["extra"] != 0 {
		t.Errorf("%d pods, minMember %d, taskCount %v", len(objs.Pods), objs.Size.MinMember, objs.Size.TaskCount)
	}
	if _, ok := objs.Size.MinTaskMember["extra"]; ok {
		t.Errorf("minTaskMember %v names an empty group", objs.Size.MinTaskMember)
	}
}
