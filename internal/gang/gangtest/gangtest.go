// Package gangtest holds a GPUCluster that exercises every part of the
// gang builder (package gang): init containers, a restartable sidecar, a
// RuntimeClass's overhead, limits standing in for requests, two worker
// groups (one elastic), GPUs as an extended resource and through DRA, node
// affinity, a priority class and a queue. The operator's tests and the
// suite's no-operator floor's (conformance/bare) build it each their own
// way and check they get what gang.Build makes of it: the same objects.
package gangtest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// RuntimeClass is the workers' RuntimeClass; Overheads gives its overhead.
const RuntimeClass = "kata"

// Overheads are the RuntimeClasses' pod overheads as the cluster's
// RuntimeClass objects would say them.
func Overheads() map[string]corev1.ResourceList {
	return map[string]corev1.ResourceList{RuntimeClass: {
		corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("160Mi"),
	}}
}

// Cluster is GPUCluster lab/train with a Volcano gang in queue research
// at priority high: a head whose init container outweighs it; 3 workers
// of 4 nvidia.com/gpu each on H100s of at least 80 GiB, with a sidecar, an
// init container and the kata RuntimeClass; and 2 "extra" pods (1 needed)
// with 2 GPUs each claimed through DRA, sized from limits alone.
func Cluster() *gpulabv1alpha1.GPUCluster {
	always := corev1.ContainerRestartPolicyAlways
	head := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "vision"}, Annotations: map[string]string{"note": "rank0"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "fetch", Image: "fetcher", Resources: requests("cpu", "4", "memory", "2Gi")}},
			Containers: []corev1.Container{{Name: "head", Image: "trainer", Resources: requests("cpu", "1", "memory", "1Gi"),
				Ports: []corev1.ContainerPort{{ContainerPort: 29500}, {Name: "dashboard", ContainerPort: 8265}}}},
		},
	}
	runtimeClass := RuntimeClass
	workers := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "vision"}},
		Spec: corev1.PodSpec{
			RuntimeClassName: &runtimeClass,
			InitContainers: []corev1.Container{
				{Name: "proxy", Image: "envoy", RestartPolicy: &always, Resources: requests("cpu", "500m", "memory", "64Mi")},
				{Name: "prep", Image: "prep", Resources: requests("cpu", "3")},
			},
			Containers: []corev1.Container{
				{Name: "log", Image: "fluent", Resources: requests("cpu", "100m")},
				{Name: "train", Image: "trainer", Resources: requests("cpu", "2", "memory", "8Gi")},
			},
		},
	}
	extra := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "eval", Image: "evaluator",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}}}}
	return &gpulabv1alpha1.GPUCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: gpulabv1alpha1.GroupVersion.String(), Kind: "GPUCluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "train", UID: "uid-train"},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Head: gpulabv1alpha1.HeadSpec{Template: head},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{
				{Name: "workers", Replicas: 3, Template: workers, GPUs: &gpulabv1alpha1.GPURequest{
					PerPod: ptr(int32(4)), Product: "NVIDIA-H100-80GB-HBM3", MinMemoryMiB: ptr(int64(80000)), Container: "train"}},
				{Name: "extra", Replicas: 2, MinReplicas: ptr(int32(1)), Template: extra, GPUs: &gpulabv1alpha1.GPURequest{
					PerPod: ptr(int32(2)), DeviceClassName: "gpu.gpulab.io", Selectors: []string{`device.attributes["gpu.gpulab.io"].architecture == "Hopper"`}}},
			},
			Scheduling: gpulabv1alpha1.SchedulingSpec{Scheduler: gpulabv1alpha1.SchedulerVolcano, Queue: "research", PriorityClassName: "high"},
		},
	}
}

func requests(pairs ...string) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return corev1.ResourceRequirements{Requests: l}
}

func ptr[T any](v T) *T { return &v }
