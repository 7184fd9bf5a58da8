// Package scheduler is the seam between the GPUCluster controller and the
// scheduler that places a cluster's pods: Volcano (a PodGroup gang) or the
// default kube-scheduler (no gang).
package scheduler

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/sizing"
)

// ErrNotInstalled means the scheduler's API (Volcano's CRDs) is absent.
var ErrNotInstalled = errors.New("scheduler not installed")

// Backend places a cluster's pods as one unit, or not at all.
type Backend interface {
	// Name is the scheduler's name as in spec.scheduling.scheduler.
	Name() gpulabv1alpha1.SchedulerName
	// Decorate adds what a pod needs to be placed by this scheduler in the
	// cluster's gang, as member of task.
	Decorate(pod *corev1.Pod, cluster *gpulabv1alpha1.GPUCluster, task string)
	// Ensure creates or updates the gang before any pod exists and reports
	// what it observed (nil when the scheduler has no gang object). The
	// bool says whether the gang object changed.
	Ensure(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster, gang sizing.GangSize) (*gpulabv1alpha1.PodGroupStatus, bool, error)
	// Release deletes the gang so its queue's resources are freed. Call it
	// only once the cluster's pods are gone.
	Release(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster) error
}

// For returns the Backend implementation for a cluster's scheduler.
func For(name gpulabv1alpha1.SchedulerName) Backend {
	if name == gpulabv1alpha1.SchedulerDefault {
		return defaultScheduler{}
	}
	return Volcano{}
}

// defaultScheduler leaves pods to kube-scheduler: no gang object.
type defaultScheduler struct{}

var _ Backend = defaultScheduler{}

func (defaultScheduler) Name() gpulabv1alpha1.SchedulerName { return gpulabv1alpha1.SchedulerDefault }

func (defaultScheduler) Decorate(*corev1.Pod, *gpulabv1alpha1.GPUCluster, string) {}

func (defaultScheduler) Ensure(context.Context, client.Client, *gpulabv1alpha1.GPUCluster, sizing.GangSize) (*gpulabv1alpha1.PodGroupStatus, bool, error) {
	return nil, false, nil
}

func (defaultScheduler) Release(context.Context, client.Client, *gpulabv1alpha1.GPUCluster) error {
	return nil
}
