package v1alpha1

// Labels and annotations gpulab puts on the objects it creates.
const (
	// ClusterLabel names the GPUCluster a pod or Service belongs to. The
	// operator's pod cache is restricted to pods carrying it.
	ClusterLabel = "gpulab.io/cluster"
	// GroupLabel names the pod's group: "head" or a worker group name.
	GroupLabel = "gpulab.io/group"
	// IndexLabel is the pod's index within its group.
	IndexLabel = "gpulab.io/index"
	// PodTemplateHashAnnotation is a hash of a pod as the operator built it
	// from the spec. A pod whose hash differs from the current spec's is
	// out of date, and its whole gang is recreated.
	PodTemplateHashAnnotation = "gpulab.io/pod-template-hash"
)
