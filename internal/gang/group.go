package gang

import (
	corev1 "k8s.io/api/core/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// Group is one group of identical pods of a gang: the head or a worker
// group, with its GPU request resolved.
type Group struct {
	// Name is the group's name ("head" or a worker group's), its pods'
	// group label and task.
	Name string
	// Replicas is how many pods the group has.
	Replicas int32
	// Min is how many of them the gang needs to start.
	Min int32
	// GPUs is the group's accelerator request; nil for none.
	GPUs *gpulabv1alpha1.GPURequest
	// GPUsPerPod is GPUs resolved to a count per pod: perPod as given;
	// a wholeNode request needs the fleet, so Groups leaves it 0 and the
	// caller resolves it.
	GPUsPerPod int32
	// Template is the pods' template; building never changes it.
	Template *corev1.PodTemplateSpec
}

// Groups lists a cluster's groups, the head first and then the worker
// groups in spec order, as the spec says them: a worker group's minimum is
// minReplicas, or all its replicas.
func Groups(cluster *gpulabv1alpha1.GPUCluster) []Group {
	head := cluster.Spec.Head.GPUs
	groups := []Group{{Name: gpulabv1alpha1.HeadGroupName, Replicas: 1, Min: 1, GPUs: head, GPUsPerPod: perPod(head),
		Template: &cluster.Spec.Head.Template}}
	for i := range cluster.Spec.WorkerGroups {
		wg := &cluster.Spec.WorkerGroups[i]
		minimum := wg.Replicas
		if wg.MinReplicas != nil {
			minimum = *wg.MinReplicas
		}
		groups = append(groups, Group{Name: wg.Name, Replicas: wg.Replicas, Min: minimum, GPUs: wg.GPUs, GPUsPerPod: perPod(wg.GPUs),
			Template: &wg.Template})
	}
	return groups
}

func perPod(r *gpulabv1alpha1.GPURequest) int32 {
	if r == nil || r.PerPod == nil {
		return 0
	}
	return *r.PerPod
}

// PodName is the deterministic name of pod index of group in cluster.
func PodName(cluster, group string, index int32) string {
	if group == gpulabv1alpha1.HeadGroupName {
		return gpulabv1alpha1.HeadPodName(cluster)
	}
	return gpulabv1alpha1.WorkerPodName(cluster, group, index)
}
