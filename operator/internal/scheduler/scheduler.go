// Package scheduler is the seam between the GPUCluster controller and the
// scheduler that places a cluster's pods: Volcano (a scheduling.volcano.sh
// PodGroup), Kubernetes itself (a scheduling.k8s.io PodGroup with a gang
// policy, kube-scheduler's gangscheduling plugin) or the default
// kube-scheduler without a gang. Every backend is fed the same gang
// arithmetic (internal/gang/sizing) and writes the PodGroup that
// internal/gang builds, which also decorates each pod for its scheduler;
// what a backend cannot express it reports through Coverage, never drops
// silently.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang/sizing"
)

// ErrNotInstalled means the scheduler's API (Volcano's CRDs, or the
// scheduling.k8s.io PodGroups of the GenericWorkload gate) is not served.
// Backends return it as a *NotServedError, which says so for status.
var ErrNotInstalled = errors.New("scheduler not installed")

// ErrReleasing means the gang's previous PodGroup is being deleted (a
// suspended cluster's, or one replaced because an immutable field
// changed): no pod may join the name until it is gone, and its deletion
// wakes the cluster.
var ErrReleasing = errors.New("the gang's previous PodGroup is being deleted")

// NotServedError says which API a backend needs and is not served, as
// the reason and message of the cluster's GangScheduled condition.
type NotServedError struct {
	// Reason is the condition reason (e.g. VolcanoNotInstalled).
	Reason string
	// Message tells the user what to install or enable.
	Message string
	// Err is the API server's (or REST mapper's) answer.
	Err error
}

func (e *NotServedError) Error() string { return e.Message + ": " + e.Err.Error() }

// Is makes errors.Is(err, ErrNotInstalled) hold.
func (e *NotServedError) Is(target error) bool { return target == ErrNotInstalled }

func (e *NotServedError) Unwrap() error { return e.Err }

// Coverage is what a backend's gang object makes of a cluster's gang
// policy, as the GangPolicyComplete condition says it.
type Coverage struct {
	// Complete says the gang object carries the whole policy.
	Complete bool
	// Reason and Message are the condition's.
	Reason, Message string
}

// ClaimedDevices names the cluster's groups whose GPUs come through DRA,
// with each pod's count and DeviceClass ("workers: 4 of gpu.gpulab.io per
// pod"); "" when none does.
func ClaimedDevices(cluster *gpulabv1alpha1.GPUCluster) string {
	var out []string
	add := func(group string, r *gpulabv1alpha1.GPURequest) {
		if r != nil && r.DeviceClassName != "" && r.PerPod != nil {
			out = append(out, fmt.Sprintf("%s: %d of %s per pod", group, *r.PerPod, r.DeviceClassName))
		}
	}
	add(gpulabv1alpha1.HeadGroupName, cluster.Spec.Head.GPUs)
	for i := range cluster.Spec.WorkerGroups {
		add(cluster.Spec.WorkerGroups[i].Name, cluster.Spec.WorkerGroups[i].GPUs)
	}
	return strings.Join(out, "; ")
}

// Backend places a cluster's pods as one unit, or not at all.
type Backend interface {
	// Name is the scheduler's name as in spec.scheduling.scheduler.
	Name() gpulabv1alpha1.SchedulerName
	// Ensure creates or updates the gang before any pod exists and reports
	// what it observed (nil when the scheduler has no gang object). The
	// bool says whether the gang object changed. An error wrapping
	// ErrNotInstalled says the API is not served; one wrapping
	// ErrReleasing says to create no pod yet.
	Ensure(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster, gang sizing.GangSize) (*gpulabv1alpha1.PodGroupStatus, bool, error)
	// Release deletes the gang so its queue's resources are freed. Call it
	// only once the cluster's pods are gone.
	Release(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster) error
	// Coverage says what of gang, computed for cluster, the gang object
	// carries and what it cannot.
	Coverage(cluster *gpulabv1alpha1.GPUCluster, gang sizing.GangSize) Coverage
}

// For returns the Backend implementation for a cluster's scheduler: the
// one whose pods gang.Decorate decorates for that scheduler.
func For(name gpulabv1alpha1.SchedulerName) Backend {
	switch name {
	case gpulabv1alpha1.SchedulerDefault:
		return defaultScheduler{}
	case gpulabv1alpha1.SchedulerKubernetes:
		return Kubernetes{}
	}
	return Volcano{}
}

// defaultScheduler leaves pods to kube-scheduler: no gang object.
type defaultScheduler struct{}

var _ Backend = defaultScheduler{}

func (defaultScheduler) Name() gpulabv1alpha1.SchedulerName { return gpulabv1alpha1.SchedulerDefault }

func (defaultScheduler) Ensure(context.Context, client.Client, *gpulabv1alpha1.GPUCluster, sizing.GangSize) (*gpulabv1alpha1.PodGroupStatus, bool, error) {
	return nil, false, nil
}

func (defaultScheduler) Release(context.Context, client.Client, *gpulabv1alpha1.GPUCluster) error {
	return nil
}

func (defaultScheduler) Coverage(*gpulabv1alpha1.GPUCluster, sizing.GangSize) Coverage {
	return Coverage{Reason: gpulabv1alpha1.ReasonNoGang,
		Message: "scheduler default: kube-scheduler places each pod on its own; no gang (minMember, minTaskMember, minResources) is enforced"}
}
