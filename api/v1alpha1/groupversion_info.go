package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every gpulab kind.
	GroupVersion = schema.GroupVersion{Group: "gpulab.io", Version: "v1alpha1"}

	// SchemeBuilder registers the gpulab kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the gpulab kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes keeps the API package's imports to apimachinery, so any
// client can import it cheaply.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&GPUCluster{}, &GPUClusterList{},
		&GPUJob{}, &GPUJobList{},
		&GPUInventory{}, &GPUInventoryList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
