package gang

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// HeadService is a headless Service for the cluster's head pod. It
// publishes the head's address before the head is Ready, because workers
// rendezvous with it while it starts.
func HeadService(cluster *gpulabv1alpha1.GPUCluster) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      gpulabv1alpha1.HeadServiceName(cluster.Name),
			Labels:    map[string]string{gpulabv1alpha1.ClusterLabel: cluster.Name},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector: map[string]string{
				gpulabv1alpha1.ClusterLabel: cluster.Name,
				gpulabv1alpha1.GroupLabel:   gpulabv1alpha1.HeadGroupName,
			},
			Ports: gpulabv1alpha1.HeadServicePorts(cluster.Spec.Head.Template.Spec.Containers),
		},
	}
}
