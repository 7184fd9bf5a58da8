package scheduler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	k8sscheduling "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/sizing"
	"github.com/gpulab/gpulab/operator/internal/ownership"
)

// NativePodGroupVersion is the scheduling.k8s.io version the Kubernetes
// backend writes PodGroups in (gang.NativePodGroupVersion, v1beta1).
var NativePodGroupVersion = gang.NativePodGroupVersion

// Phases of a scheduling.k8s.io PodGroup in status.podGroup.phase, from
// its PodGroupInitiallyScheduled condition; a False condition's reason
// (Unschedulable, SchedulerError) stands as the phase.
const (
	// NativePhasePending: kube-scheduler has not decided on the gang yet.
	NativePhasePending = "Pending"
	// NativePhaseScheduled: the gang's minCount was placed at least once.
	NativePhaseScheduled = "Scheduled"
)

// Kubernetes gang-schedules a cluster through kube-scheduler's own gang
// scheduling: a scheduling.k8s.io PodGroup, owned by the cluster, whose
// gang policy's minCount is the gang's minMember, and every pod's
// spec.schedulingGroup naming it. No Workload is created: a PodGroup's
// workloadRef is optional, and nothing gpulab needs reads a Workload.
type Kubernetes struct{}

var _ Backend = Kubernetes{}

// Name implements Backend.
func (Kubernetes) Name() gpulabv1alpha1.SchedulerName { return gpulabv1alpha1.SchedulerKubernetes }

// Ensure implements Backend. minCount is mutable and updated in place;
// the gang policy and priorityClassName are immutable, so a PodGroup
// whose own differ is deleted and created anew once it is gone (the pods
// built from the old spec go meanwhile: their template hash changed with
// the priority class). A PodGroup being deleted (suspend, replacement)
// is waited for: pods naming it would join a dying group.
func (Kubernetes) Ensure(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster, size sizing.GangSize) (*gpulabv1alpha1.PodGroupStatus, bool, error) {
	built := gang.NativePodGroup(cluster, size)
	want := built.Spec
	pg := &k8sscheduling.PodGroup{}
	key := client.ObjectKeyFromObject(built)
	err := c.Get(ctx, key, pg)
	switch {
	case meta.IsNoMatchError(err):
		return nil, false, nativeNotServed(err)
	case apierrors.IsNotFound(err):
		pg = built
		if err := controllerutil.SetControllerReference(cluster, pg, c.Scheme()); err != nil {
			return nil, false, err
		}
		if err := c.Create(ctx, pg); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				// NotFound: the API server's discovery lists the kind but
				// its storage is off (the gate off, the version on).
				return nil, false, nativeNotServed(err)
			}
			return nil, false, fmt.Errorf("creating PodGroup %s: %w", key.Name, err)
		}
		return observedNative(pg), true, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading PodGroup %s: %w", key.Name, err)
	}
	// A Job's PodGroup (WorkloadWithJob) or anyone else's may hold the name.
	if err := ownership.Check("PodGroup", pg, cluster); err != nil {
		return nil, false, err
	}
	if !pg.DeletionTimestamp.IsZero() {
		// kube-controller-manager removes the PodGroup's protection
		// finalizer once no pod uses it; its deletion wakes us.
		return nil, false, fmt.Errorf("%w: PodGroup %s is being deleted; waiting for it to go", ErrReleasing, key.Name)
	}
	if field, ok := immutableChanged(pg.Spec, want); ok {
		err := c.Delete(ctx, pg, client.Preconditions{UID: &pg.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, false, fmt.Errorf("deleting PodGroup %s to replace it: %w", key.Name, err)
		}
		return nil, true, fmt.Errorf("%w: PodGroup %s is being replaced (its %s is immutable)", ErrReleasing, key.Name, field)
	}
	if pg.Spec.SchedulingPolicy.Gang.MinCount == want.SchedulingPolicy.Gang.MinCount {
		return observedNative(pg), false, nil
	}
	updated := pg.DeepCopy()
	updated.Spec.SchedulingPolicy.Gang.MinCount = want.SchedulingPolicy.Gang.MinCount
	if err := c.Update(ctx, updated); err != nil {
		return nil, false, fmt.Errorf("updating PodGroup %s: %w", key.Name, err)
	}
	return observedNative(updated), true, nil
}

// immutableChanged names the first immutable field of have that differs
// from want. An empty priorityClassName asks for none, so the one
// admission defaults (the global default PriorityClass) is no change.
func immutableChanged(have, want k8sscheduling.PodGroupSpec) (string, bool) {
	switch {
	case have.SchedulingPolicy.Gang == nil || have.SchedulingPolicy.Basic != nil:
		return "schedulingPolicy", true
	case want.PriorityClassName != "" && have.PriorityClassName != want.PriorityClassName:
		return "priorityClassName", true
	}
	return "", false
}

// Release implements Backend: the PodGroup this cluster controls is
// deleted (the one that was read); kube-controller-manager removes its
// protection finalizer once no pod uses it.
func (Kubernetes) Release(ctx context.Context, c client.Client, cluster *gpulabv1alpha1.GPUCluster) error {
	pg := &k8sscheduling.PodGroup{}
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
	if !pg.DeletionTimestamp.IsZero() {
		return nil
	}
	err = c.Delete(ctx, pg, client.Preconditions{UID: &pg.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// Coverage implements Backend: kube-scheduler's PodGroup counts pods
// (minCount) and carries a priority class, nothing more.
func (Kubernetes) Coverage(cluster *gpulabv1alpha1.GPUCluster, size sizing.GangSize) Coverage {
	var missing []string
	if !size.TaskMinimumsImplied() {
		missing = append(missing, fmt.Sprintf("minTaskMember %s (the PodGroup has no per-task minimums: any %d of the cluster's pods meet minCount)",
			formatTaskMembers(size.MinTaskMember), size.MinMember))
	}
	if len(size.MinResources) > 0 {
		missing = append(missing, "minResources (no queue admission: kube-scheduler checks the gang against free node capacity when it places it)")
	}
	if claimed := ClaimedDevices(cluster); claimed != "" {
		missing = append(missing, "the GPUs claimed through DRA by "+claimed+" (a PodGroup's own resource claims are shared by all its pods, so they cannot give each worker its own; each pod's claim is allocated when it is placed)")
	}
	if cluster.Spec.Scheduling.Queue != "" && cluster.Spec.Scheduling.Queue != "default" {
		// Refused by the CRD's validation; kept for objects stored before it.
		missing = append(missing, fmt.Sprintf("queue %q (kube-scheduler has no queues)", cluster.Spec.Scheduling.Queue))
	}
	if len(missing) == 0 {
		return Coverage{Complete: true, Reason: gpulabv1alpha1.ReasonGangPolicyExpressed,
			Message: fmt.Sprintf("the scheduling.k8s.io PodGroup's gang minCount %d carries the whole gang policy", size.MinMember)}
	}
	return Coverage{Reason: gpulabv1alpha1.ReasonGangPolicyPartial,
		Message: fmt.Sprintf("scheduler kubernetes enforces minCount %d (minMember) and priorityClassName; it cannot express %s",
			size.MinMember, strings.Join(missing, "; "))}
}

func formatTaskMembers(m map[string]int32) string {
	parts := make([]string, 0, len(m))
	for _, task := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s:%d", task, m[task]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func nativeNotServed(err error) error {
	return &NotServedError{Reason: gpulabv1alpha1.ReasonWorkloadAPINotServed, Err: err,
		Message: fmt.Sprintf("spec.scheduling.scheduler is kubernetes but the API server does not serve PodGroups (%s); enable the GenericWorkload feature gate on kube-apiserver, kube-scheduler and kube-controller-manager and --runtime-config=%s=true on kube-apiserver, then restart the operator, or use scheduler: volcano or default",
			NativePodGroupVersion, NativePodGroupVersion)}
}

// observedNative mirrors a scheduling.k8s.io PodGroup into status.
func observedNative(pg *k8sscheduling.PodGroup) *gpulabv1alpha1.PodGroupStatus {
	s := &gpulabv1alpha1.PodGroupStatus{
		Name:       pg.Name,
		APIVersion: NativePodGroupVersion.String(),
		Phase:      NativePhasePending,
	}
	if pg.Spec.SchedulingPolicy.Gang != nil {
		s.MinMember = pg.Spec.SchedulingPolicy.Gang.MinCount
	}
	if c := meta.FindStatusCondition(pg.Status.Conditions, k8sscheduling.PodGroupInitiallyScheduled); c != nil {
		switch {
		case c.Status == metav1.ConditionTrue:
			s.Phase = NativePhaseScheduled
		case c.Status == metav1.ConditionFalse && c.Reason != "":
			s.Phase = c.Reason
		case c.Status == metav1.ConditionFalse:
			s.Phase = k8sscheduling.PodGroupReasonUnschedulable
		}
	}
	return s
}
