package benchscale

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/poll"
)

// warmUpTimeout bounds the warm-up cluster's way to Ready and away.
const warmUpTimeout = 2 * time.Minute

// warmUp takes one small GPUCluster (no GPUs) to Ready and deletes it.
// The operator's readiness probe passes before it holds the Lease and its
// controllers run; a burst created in that gap would measure the
// operator's start, the same second or so at every N, not how it takes
// the burst.
func warmUp(ctx context.Context, c client.Client) error {
	pod := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	}
	gc := &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "bench-scale-warm-up"},
		Spec: gpulabv1alpha1.GPUClusterSpec{Head: gpulabv1alpha1.HeadSpec{Template: pod("head")},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "workers", Replicas: 1, Template: pod("worker")}}},
	}
	if err := c.Create(ctx, gc); err != nil {
		return fmt.Errorf("creating the warm-up cluster: %w", err)
	}
	if err := poll.Until(ctx, warmUpTimeout, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(gc), gc); err != nil {
			return false, err.Error()
		}
		return gc.Status.Phase == gpulabv1alpha1.ClusterReady, fmt.Sprintf("phase %q", gc.Status.Phase)
	}); err != nil {
		return fmt.Errorf("the warm-up cluster did not become Ready: %w", err)
	}
	if err := c.Delete(ctx, gc); err != nil {
		return fmt.Errorf("deleting the warm-up cluster: %w", err)
	}
	return poll.Until(ctx, warmUpTimeout, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gc), gc)
		return apierrors.IsNotFound(err), fmt.Sprintf("still there (%v)", err)
	})
}
