// Package scheme is the API scheme every gpulab client shares: Kubernetes'
// own kinds, CRDs, Volcano's PodGroups, Queues and Jobs, and gpulab's
// types. It sits on the bottom floor so that the suite on a real cluster,
// the testbeds and the operator's tests use one scheme without importing
// each other.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// Scheme knows every kind gpulab's clients read or write.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(schedulingv1beta1.AddToScheme(Scheme))
	utilruntime.Must(batchv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(gpulabv1alpha1.AddToScheme(Scheme))
}
