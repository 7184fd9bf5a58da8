// Package v1alpha1 holds the gpulab.io/v1alpha1 API: GPUCluster (a head pod
// plus worker groups gang-scheduled by Volcano), GPUJob (a run-to-completion
// lifecycle on top of a GPUCluster) and GPUInventory (the healthy GPUs of one
// node, published by that node's agent).
//
// Validation that can be decided from the object alone lives here as OpenAPI
// markers and CEL rules, so the API server rejects what can never work with a
// message that names the problem. What depends on cluster state (inventory,
// queues) is reported later as a status condition.
//
// +kubebuilder:object:generate=true
// +groupName=gpulab.io
package v1alpha1
