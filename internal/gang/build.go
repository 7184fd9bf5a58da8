package gang

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang/sizing"
)

// Objects are a gang's objects as they will be created, without owner
// references (whoever creates them sets its own).
type Objects struct {
	// Pods are the head's and then each group's pods by index.
	Pods []*corev1.Pod
	// Service is the headless head Service.
	Service *corev1.Service
	// ClaimTemplates are the DRA groups' ResourceClaimTemplates, in group
	// order.
	ClaimTemplates []*resourceapi.ResourceClaimTemplate
	// Size is the gang's sizing, from the pods as built, each with its
	// RuntimeClass's overhead.
	Size sizing.GangSize
}

// Build builds a cluster's gang from its groups (Groups, with GPUs
// resolved). overheads maps RuntimeClass names to their pod overhead, as
// the cluster's RuntimeClasses say; admission adds it to each pod, so only
// the sizing counts it.
func Build(cluster *gpulabv1alpha1.GPUCluster, groups []Group, overheads map[string]corev1.ResourceList) *Objects {
	objs := &Objects{Service: HeadService(cluster)}
	members := make([]sizing.Member, 0, len(groups))
	for i := range groups {
		g := &groups[i]
		var sample *corev1.Pod
		for idx := range g.Replicas {
			pod := BuildPod(cluster, g, idx)
			objs.Pods = append(objs.Pods, pod)
			if sample == nil {
				sample = pod
			}
		}
		if sample == nil {
			// A group scaled to zero still has a shape, and a task.
			sample = BuildPod(cluster, g, 0)
		}
		if g.GPUs != nil && g.GPUs.DeviceClassName != "" {
			objs.ClaimTemplates = append(objs.ClaimTemplates, ClaimTemplate(cluster, g))
		}
		members = append(members, sizing.Member{Task: g.Name, Pod: WithOverhead(sample, overheads), Min: g.Min, Count: g.Replicas})
	}
	objs.Size = sizing.ForMembers(members)
	return objs
}

// WithOverhead returns the pod as admission will store it: with its
// RuntimeClass's overhead. Only the sizing copy gets it; the API server
// rejects pods that set overhead themselves.
func WithOverhead(pod *corev1.Pod, overheads map[string]corev1.ResourceList) *corev1.Pod {
	name := pod.Spec.RuntimeClassName
	if name == nil || overheads[*name] == nil {
		return pod
	}
	sized := pod.DeepCopy()
	sized.Spec.Overhead = overheads[*name].DeepCopy()
	return sized
}
