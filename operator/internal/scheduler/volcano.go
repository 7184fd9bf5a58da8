package scheduler

import (
	"context"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/sizing"
	"github.com/gpulab/gpulab/operator/internal/ownership"
)

// Volcano gang-schedules a cluster through a PodGroup owned by the cluster.
type Volcano struct{}

var _ Backend = Volcano{}

// Name implements Backend.
func (Volcano) Name() gpulabv1alpha1.SchedulerName { return gpulabv1alpha1.SchedulerVolcano }

// Ensure implements Backend.
func (Volcano) Ensure(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster, size sizing.GangSize) (*gpulabv1alpha1.PodGroupStatus, bool, error) {
	built := gang.VolcanoPodGroup(cluster, size)
	want := built.Spec
	pg := &schedulingv1beta1.PodGroup{}
	key := client.ObjectKeyFromObject(built)
	err := c.Get(ctx, key, pg)
	switch {
	case meta.IsNoMatchError(err):
		return nil, false, volcanoNotServed(err)
	case apierrors.IsNotFound(err):
		pg = built
		if err := controllerutil.SetControllerReference(cluster, pg, c.Scheme()); err != nil {
			return nil, false, err
		}
		if err := c.Create(ctx, pg); err != nil {
			if meta.IsNoMatchError(err) {
				return nil, false, volcanoNotServed(err)
			}
			return nil, false, fmt.Errorf("creating PodGroup %s: %w", key.Name, err)
		}
		return observed(pg), true, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading PodGroup %s: %w", key.Name, err)
	}
	// KubeRay's ray-<name>-pg or a Volcano Job's PodGroup may hold the name.
	if err := ownership.Check("PodGroup", pg, cluster); err != nil {
		return nil, false, err
	}
	if specEqual(pg.Spec, want) {
		return observed(pg), false, nil
	}
	pg.Spec = want
	if err := c.Update(ctx, pg); err != nil {
		return nil, false, fmt.Errorf("updating PodGroup %s: %w", key.Name, err)
	}
	return observed(pg), true, nil
}

// Release implements Backend: deleting the PodGroup frees what Volcano holds
// for it in the queue (an Inqueue PodGroup keeps its minResources reserved).
// Only a PodGroup this cluster controls is deleted, the one that was read.
func (Volcano) Release(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster) error {
	pg := &schedulingv1beta1.PodGroup{}
	err := c.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: gpulabv1alpha1.PodGroupName(cluster.Name)}, pg)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading PodGroup %s: %w", gpulabv1alpha1.PodGroupName(cluster.Name), err)
	}
	if err := ownership.Check("PodGroup", pg, cluster); err != nil {
		return err
	}
	err = c.Delete(ctx, pg, client.Preconditions{UID: &pg.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// Coverage implements Backend: a Volcano PodGroup carries the whole gang
// policy.
func (Volcano) Coverage(cluster *gpulabv1alpha1.GPUCluster, _ sizing.GangSize) Coverage {
	if claimed := ClaimedDevices(cluster); claimed != "" {
		// v1.15 reads deviceclass/<class> keys in minResources; the
		// versions gpulab builds (v1.14.1, v1.10.0) read none.
		return Coverage{Reason: gpulabv1alpha1.ReasonGangPolicyPartial,
			Message: "the Volcano PodGroup carries minMember, minTaskMember, minResources, queue and priorityClassName, but minResources leaves out the GPUs claimed through DRA by " +
				claimed + ": Volcano before v1.15 cannot count claimed devices; the pods still bind all-or-nothing (minMember)"}
	}
	return Coverage{Complete: true, Reason: gpulabv1alpha1.ReasonGangPolicyExpressed,
		Message: "the Volcano PodGroup carries minMember, minTaskMember, minResources, queue and priorityClassName"}
}

func volcanoNotServed(err error) error {
	return &NotServedError{Reason: gpulabv1alpha1.ReasonVolcanoNotInstalled, Err: err,
		Message: "spec.scheduling.scheduler is volcano but Volcano's PodGroup API (scheduling.volcano.sh/v1beta1) is not served; install Volcano or use scheduler: default"}
}

func specEqual(a, b schedulingv1beta1.PodGroupSpec) bool {
	return a.MinMember == b.MinMember && maps.Equal(a.MinTaskMember, b.MinTaskMember) &&
		a.Queue == b.Queue && a.PriorityClassName == b.PriorityClassName &&
		a.MinResources != nil && equality.Semantic.DeepEqual(*a.MinResources, *b.MinResources)
}

func observed(pg *schedulingv1beta1.PodGroup) *gpulabv1alpha1.PodGroupStatus {
	s := &gpulabv1alpha1.PodGroupStatus{
		Name:          pg.Name,
		APIVersion:    schedulingv1beta1.SchemeGroupVersion.String(),
		Phase:         string(pg.Status.Phase),
		MinMember:     pg.Spec.MinMember,
		MinTaskMember: maps.Clone(pg.Spec.MinTaskMember),
	}
	if pg.Spec.MinResources != nil {
		s.MinResources = pg.Spec.MinResources.DeepCopy()
	}
	return s
}
