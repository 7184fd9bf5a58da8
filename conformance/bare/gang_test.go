package bare

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
)

const runLabel = "conformance.gpulab.io/run-id"

// template is a pod of one container asking for 100m CPU, 128Mi and gpus
// GPUs (request and limit), as the suite's podTemplate builds them.
func template(container string, gpus int64) corev1.PodTemplateSpec {
	ctr := corev1.Container{Name: container, Image: "pause", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		ctr.Resources.Requests["nvidia.com/gpu"] = q
		ctr.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q}
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{runLabel: "r1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}}}
}

// created is gang g (a head, 2 workers of 4 GPUs, 1 extra of 1 GPU) as
// the API server returns it.
func created(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	cm := Object("g", map[string]string{runLabel: "r1"}, Spec{Queue: "q", Head: template("head", 0), Groups: []Group{
		{Name: "workers", Replicas: 2, Template: template("worker", 4)},
		{Name: "extra", Replicas: 1, Template: template("worker", 1)},
	}})
	cm.Namespace, cm.UID = "ns", types.UID("uid-g")
	return cm
}

func TestObjectCarriesTheGang(t *testing.T) {
	cm := created(t)
	if cm.Labels[GangLabel] != "g" || cm.Labels[runLabel] != "r1" {
		t.Errorf("labels %v", cm.Labels)
	}
	if DesiredPods(cm) != 4 {
		t.Errorf("desired %d, want 4 (head + 2 + 1)", DesiredPods(cm))
	}
	other := cm.DeepCopy()
	delete(other.Labels, GangLabel)
	if DesiredPods(other) != 0 {
		t.Error("a ConfigMap without the gang label reads as a gang")
	}
	cm.UID = ""
	if _, err := ChildrenOf(cm); err == nil {
		t.Error("children of a ConfigMap not yet created (no UID)")
	}
}

// The PodGroup is what gpulab's operator computes for the same
// GPUCluster: every pod needed, per task, and the sum of their requests.
func TestPodGroupSizedAsTheOperator(t *testing.T) {
	ch, err := ChildrenOf(created(t))
	if err != nil {
		t.Fatal(err)
	}
	pg := ch.PodGroup
	if pg.Name != gpulabv1alpha1.PodGroupName("g") || pg.Namespace != "ns" || pg.Spec.Queue != "q" {
		t.Errorf("PodGroup %s/%s in queue %q", pg.Namespace, pg.Name, pg.Spec.Queue)
	}
	if pg.Spec.MinMember != 4 {
		t.Errorf("minMember %d, want 4", pg.Spec.MinMember)
	}
	if want := map[string]int32{"head": 1, "workers": 2, "extra": 1}; !reflect.DeepEqual(pg.Spec.MinTaskMember, want) {
		t.Errorf("minTaskMember %v, want %v", pg.Spec.MinTaskMember, want)
	}
	want := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("400m"), corev1.ResourceMemory: resource.MustParse("512Mi"),
		"nvidia.com/gpu": resource.MustParse("9")}
	got := *pg.Spec.MinResources
	for name, q := range want {
		if g := got[name]; g.Cmp(q) != 0 {
			t.Errorf("minResources[%s] = %s, want %s", name, g.String(), q.String())
		}
	}
	if len(got) != len(want) {
		t.Errorf("minResources %v, want only %v", got, want)
	}
	if pg.Labels[gpulabv1alpha1.ClusterLabel] != "g" {
		t.Errorf("PodGroup labels %v", pg.Labels)
	}
}

func TestPodsNamedAndDecoratedAsTheOperator(t *testing.T) {
	ch, err := ChildrenOf(created(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ch.Pods {
		names = append(names, p.Name)
	}
	if want := []string{"g-head", "g-workers-0", "g-workers-1", "g-extra-0"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("pods %v, want %v", names, want)
	}
	w := ch.Pods[2]
	if w.Spec.SchedulerName != "volcano" || w.Spec.Hostname != w.Name || w.Namespace != "ns" {
		t.Errorf("scheduler %q, hostname %q, namespace %q", w.Spec.SchedulerName, w.Spec.Hostname, w.Namespace)
	}
	if a := w.Annotations; a[schedulingv1beta1.KubeGroupNameAnnotationKey] != "g-pg" || a[gang.TaskAnnotation] != "workers" || a[gpulabv1alpha1.PodTemplateHashAnnotation] == "" {
		t.Errorf("annotations %v", a)
	}
	wantLabels := map[string]string{runLabel: "r1", gpulabv1alpha1.ClusterLabel: "g", gpulabv1alpha1.GroupLabel: "workers", gpulabv1alpha1.IndexLabel: "1"}
	if !reflect.DeepEqual(w.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", w.Labels, wantLabels)
	}
	if q := w.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]; q.Value() != 4 {
		t.Errorf("worker asks for %s GPUs, want 4", q.String())
	}
	env := map[string]string{}
	for _, e := range w.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[gpulabv1alpha1.EnvHeadAddress] != "g-head.ns.svc" || env[gpulabv1alpha1.EnvIndex] != "1" || env[gpulabv1alpha1.EnvGroup] != "workers" {
		t.Errorf("env %v", env)
	}
	// The hash is the operator's: of the pod as built, so it tells the
	// two workers (their names differ) apart and is stable.
	if w.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] == ch.Pods[1].Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] {
		t.Error("two pods of one group with one hash")
	}
	again, _ := ChildrenOf(created(t))
	if again.Pods[2].Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] != w.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] {
		t.Error("the hash is not stable")
	}
	svc := ch.Service
	if svc.Name != "g-head" || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses ||
		svc.Spec.Selector[gpulabv1alpha1.GroupLabel] != "head" || svc.Spec.Selector[gpulabv1alpha1.ClusterLabel] != "g" {
		t.Errorf("head Service %+v", svc)
	}
}

// Every child is controlled by the ConfigMap, so deleting it cascades and
// the recorder maps the child to the gang by owner kind.
func TestChildrenControlledByTheConfigMap(t *testing.T) {
	ch, err := ChildrenOf(created(t))
	if err != nil {
		t.Fatal(err)
	}
	objs := []metav1.Object{ch.PodGroup, ch.Service}
	for _, p := range ch.Pods {
		objs = append(objs, p)
	}
	for _, o := range objs {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.Kind != "ConfigMap" || ref.APIVersion != "v1" || ref.Name != "g" || ref.UID != "uid-g" ||
			ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("%s: controller %+v", o.GetName(), ref)
		}
	}
}

// The spec travels in the ConfigMap: a second reader builds the same
// children (the suite builds them from the created object only).
func TestSpecRoundTrips(t *testing.T) {
	cm := created(t)
	var s Spec
	if err := json.Unmarshal([]byte(cm.Data[SpecKey]), &s); err != nil {
		t.Fatal(err)
	}
	if s.Queue != "q" || len(s.Groups) != 2 || s.Groups[0].Replicas != 2 || s.Pods() != 4 {
		t.Errorf("spec %+v", s)
	}
	cm.Data[SpecKey] = "{"
	if _, err := ChildrenOf(cm); err == nil || !strings.Contains(err.Error(), "not a bare gang") {
		t.Errorf("a broken spec: %v", err)
	}
}
