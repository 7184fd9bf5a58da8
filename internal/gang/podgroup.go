package gang

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	k8sscheduling "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang/sizing"
)

// Volcano pod metadata.
const (
	// VolcanoSchedulerName is the schedulerName of pods Volcano places.
	VolcanoSchedulerName = "volcano"
	// TaskAnnotation names a pod's task for minTaskMember.
	TaskAnnotation = "volcano.sh/task-spec"
)

// NativePodGroupVersion is the scheduling.k8s.io version native gangs'
// PodGroups are written in. Kubernetes 1.37 serves PodGroups in v1alpha3
// and v1beta1 (one object, stored as v1beta1), and kube-scheduler and
// kube-controller-manager read them in v1beta1 only: a cluster where
// native gangs work serves v1beta1.
var NativePodGroupVersion = k8sscheduling.SchemeGroupVersion

// Decorate adds what pod needs to be placed by the cluster's scheduler as
// a member of its gang, in task: for Volcano (the default) its scheduler
// name and the group and task annotations; for kubernetes the default
// scheduler and spec.schedulingGroup naming the PodGroup (the task is the
// pod's group label already: that PodGroup has no tasks); for default,
// nothing.
func Decorate(pod *corev1.Pod, cluster *gpulabv1alpha1.GPUCluster, task string) {
	switch cluster.Spec.Scheduling.Scheduler {
	case gpulabv1alpha1.SchedulerDefault:
	case gpulabv1alpha1.SchedulerKubernetes:
		pod.Spec.SchedulerName = corev1.DefaultSchedulerName
		name := gpulabv1alpha1.PodGroupName(cluster.Name)
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &name}
	default:
		pod.Spec.SchedulerName = VolcanoSchedulerName
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey] = gpulabv1alpha1.PodGroupName(cluster.Name)
		pod.Annotations[TaskAnnotation] = task
	}
}

// podGroupMeta is a PodGroup's name, namespace and cluster label.
func podGroupMeta(cluster *gpulabv1alpha1.GPUCluster) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: cluster.Namespace, Name: gpulabv1alpha1.PodGroupName(cluster.Name),
		Labels: map[string]string{gpulabv1alpha1.ClusterLabel: cluster.Name},
	}
}

// VolcanoPodGroup is the cluster's Volcano PodGroup for a gang of size:
// minMember, minTaskMember and minResources from the pods as built, the
// cluster's queue and priority class.
func VolcanoPodGroup(cluster *gpulabv1alpha1.GPUCluster, size sizing.GangSize) *schedulingv1beta1.PodGroup {
	minResources := size.MinResources.DeepCopy()
	return &schedulingv1beta1.PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: podGroupMeta(cluster),
		Spec: schedulingv1beta1.PodGroupSpec{
			MinMember:         size.MinMember,
			MinTaskMember:     maps.Clone(size.MinTaskMember),
			Queue:             cluster.Spec.Scheduling.Queue,
			PriorityClassName: cluster.Spec.Scheduling.PriorityClassName,
			MinResources:      &minResources,
		},
	}
}

// NativePodGroup is the cluster's scheduling.k8s.io PodGroup for a gang
// of size: a gang policy whose minCount is minMember, and the cluster's
// priority class. It has no queue, tasks or resources (what the operator
// reports as the policy it cannot express).
func NativePodGroup(cluster *gpulabv1alpha1.GPUCluster, size sizing.GangSize) *k8sscheduling.PodGroup {
	return &k8sscheduling.PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: NativePodGroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: podGroupMeta(cluster),
		Spec: k8sscheduling.PodGroupSpec{
			SchedulingPolicy:  k8sscheduling.PodGroupSchedulingPolicy{Gang: &k8sscheduling.GangSchedulingPolicy{MinCount: size.MinMember}},
			PriorityClassName: cluster.Spec.Scheduling.PriorityClassName,
		},
	}
}
