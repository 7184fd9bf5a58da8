package sizing_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpulab/gpulab/internal/gang/sizing"
)

// A worker with an init container larger than its main container counts
// with the init container's request.
func ExampleForMembers() {
	worker := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "fetch", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}}},
		Containers: []corev1.Container{{Name: "train", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("8")}}}},
	}}
	g := sizing.ForMembers([]sizing.Member{{Task: "workers", Pod: worker, Min: 2}})
	cpu, gpu := g.MinResources[corev1.ResourceCPU], g.MinResources["nvidia.com/gpu"]
	fmt.Println(g.MinMember, g.MinTaskMember, cpu.String(), gpu.String())
	// Output: 2 map[workers:2] 16 16
}
