package gang

import (
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// ClaimTemplate is a DRA group's ResourceClaimTemplate: exactly
// GPUsPerPod devices of its DeviceClass that pass its selectors, for each
// pod. g.GPUs must name a DeviceClass.
func ClaimTemplate(cluster *gpulabv1alpha1.GPUCluster, g *Group) *resourceapi.ResourceClaimTemplate {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: g.GPUs.DeviceClassName,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(g.GPUsPerPod)}
	for _, expr := range g.GPUs.Selectors {
		req.Selectors = append(req.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: gpulabv1alpha1.GPUClaimTemplateName(cluster.Name, g.Name),
			Labels: map[string]string{gpulabv1alpha1.ClusterLabel: cluster.Name, gpulabv1alpha1.GroupLabel: g.Name}},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: gpulabv1alpha1.GPUClaimName, Exactly: req}},
		}}},
	}
}
