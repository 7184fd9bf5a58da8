package gang_test

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/gangtest"
)

func nativeCluster() *gpulabv1alpha1.GPUCluster {
	return &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gang", UID: "uid-gang"},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Scheduling:   gpulabv1alpha1.SchedulingSpec{Scheduler: gpulabv1alpha1.SchedulerKubernetes, Queue: "default"},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "workers", Replicas: 2}},
		},
	}
}

// TestKubernetesDecorate: every pod goes to kube-scheduler, whatever its
// template asked, as a member of the cluster's PodGroup, with nothing of
// Volcano's.
func TestKubernetesDecorate(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "volcano"}}
	gang.Decorate(pod, nativeCluster(), "workers")
	if pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("schedulerName = %q, want %q", pod.Spec.SchedulerName, corev1.DefaultSchedulerName)
	}
	if g := pod.Spec.SchedulingGroup; g == nil || g.PodGroupName == nil || *g.PodGroupName != "gang-pg" {
		t.Errorf("schedulingGroup = %+v, want podGroupName gang-pg", g)
	}
	if len(pod.Annotations) != 0 {
		t.Errorf("annotations %v, want none (Volcano's are not needed)", pod.Annotations)
	}
}

// TestVolcanoAndDefaultDecorate: Volcano (also when the scheduler is left
// unset, as before defaulting) gets its scheduler name and the group and
// task annotations; the default scheduler gets nothing.
func TestVolcanoAndDefaultDecorate(t *testing.T) {
	for _, name := range []gpulabv1alpha1.SchedulerName{gpulabv1alpha1.SchedulerVolcano, ""} {
		c := nativeCluster()
		c.Spec.Scheduling.Scheduler = name
		pod := &corev1.Pod{}
		gang.Decorate(pod, c, "workers")
		want := map[string]string{schedulingv1beta1.KubeGroupNameAnnotationKey: "gang-pg", gang.TaskAnnotation: "workers"}
		if pod.Spec.SchedulerName != "volcano" || !reflect.DeepEqual(pod.Annotations, want) || pod.Spec.SchedulingGroup != nil {
			t.Errorf("scheduler %q: schedulerName %q annotations %v group %v", name, pod.Spec.SchedulerName, pod.Annotations, pod.Spec.SchedulingGroup)
		}
	}
	c := nativeCluster()
	c.Spec.Scheduling.Scheduler = gpulabv1alpha1.SchedulerDefault
	pod := &corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "mine"}}
	gang.Decorate(pod, c, "workers")
	if pod.Spec.SchedulerName != "mine" || pod.Annotations != nil || pod.Spec.SchedulingGroup != nil {
		t.Errorf("default scheduler decorated the pod: %+v", pod)
	}
}

func TestVolcanoPodGroup(t *testing.T) {
	c, objs := build(t)
	pg := gang.VolcanoPodGroup(c, objs.Size)
	if pg.Name != "train-pg" || pg.Namespace != "lab" || pg.Labels[gpulabv1alpha1.ClusterLabel] != "train" || pg.Kind != "PodGroup" ||
		pg.APIVersion != schedulingv1beta1.SchemeGroupVersion.String() {
		t.Errorf("PodGroup %+v", pg.ObjectMeta)
	}
	s := pg.Spec
	if s.MinMember != objs.Size.MinMember || !reflect.DeepEqual(s.MinTaskMember, objs.Size.MinTaskMember) || s.Queue != "research" ||
		s.PriorityClassName != "high" || s.MinResources == nil || !reflect.DeepEqual(*s.MinResources, objs.Size.MinResources) {
		t.Errorf("PodGroup spec %+v, want the gang's sizing in queue research at priority high", s)
	}
	// The PodGroup owns its maps: changing it leaves the sizing alone.
	(*s.MinResources)["x"] = objs.Size.MinResources["cpu"]
	s.MinTaskMember["x"] = 1
	if _, ok := objs.Size.MinResources["x"]; ok {
		t.Error("the PodGroup shares minResources with the sizing")
	}
	if _, ok := objs.Size.MinTaskMember["x"]; ok {
		t.Error("the PodGroup shares minTaskMember with the sizing")
	}
}

func TestNativePodGroup(t *testing.T) {
	c := gangtest.Cluster()
	objs := gang.Build(c, gang.Groups(c), nil)
	pg := gang.NativePodGroup(c, objs.Size)
	if pg.Name != "train-pg" || pg.Namespace != "lab" || pg.Labels[gpulabv1alpha1.ClusterLabel] != "train" || pg.APIVersion != "scheduling.k8s.io/v1beta1" {
		t.Errorf("PodGroup %+v %+v", pg.TypeMeta, pg.ObjectMeta)
	}
	if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 5 || pg.Spec.SchedulingPolicy.Basic != nil || pg.Spec.PriorityClassName != "high" {
		t.Errorf("PodGroup spec %+v, want gang minCount 5 at priority high", pg.Spec)
	}
}
