package gpucluster

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/sizing"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/operator/internal/capacity"
	"github.com/gpulab/gpulab/operator/internal/scheduler"
)

// desiredState is everything a reconcile wants to exist, built in memory
// from the spec and the capacity view before anything is written.
type desiredState struct {
	// groups are the cluster's groups with their GPUs resolved.
	groups  []gang.Group
	pods    map[string]*corev1.Pod // by name
	service *corev1.Service
	// claimTemplates are the DRA groups' ResourceClaimTemplates.
	claimTemplates []*resourceapi.ResourceClaimTemplate
	gang           sizing.GangSize
	// coverage is what the scheduler's gang object makes of gang.
	coverage scheduler.Coverage
	// demands are what the gang asks of the capacity, which verdict judges.
	demands []capacity.Demand
	verdict capacity.Verdict
}

// buildDesired resolves GPU requests against capacity, builds every pod as
// it will be created (package gang, which the suite's no-operator floor
// builds its gangs with too), sizes the gang from those pods and checks it
// fits. overheads maps RuntimeClass names to their pod overhead; existing
// are the cluster's pods, whose wholeNode GPU counts replacements keep.
func buildDesired(cluster *gpulabv1alpha1.GPUCluster, fleet []capacity.Node, overheads map[string]corev1.ResourceList, backend scheduler.Backend, existing []corev1.Pod) *desiredState {
	d := &desiredState{groups: gang.Groups(cluster), pods: map[string]*corev1.Pod{}}
	var demands []capacity.Demand
	for i := range d.groups {
		g := &d.groups[i]
		g.GPUsPerPod = resolveGPUs(g.GPUs, fleet)
		if n, ok := placedWholeNodeGPUs(g, existing); ok {
			// Fixed at gang creation: a replacement matches its peers even
			// if a GPU of the fleet has turned sick since.
			g.GPUsPerPod = n
		}
		if g.GPUs != nil {
			demands = append(demands, capacity.Demand{Group: g.Name, Selector: selector(g.GPUs), GPUsPerPod: g.GPUsPerPod, Pods: g.Min})
			if g.GPUsPerPod == 0 {
				// wholeNode with no matching node: Check reports it.
				demands[len(demands)-1].GPUsPerPod = 1
			}
		}
	}
	objs := gang.Build(cluster, d.groups, overheads)
	for _, pod := range objs.Pods {
		d.pods[pod.Name] = pod
	}
	d.service, d.claimTemplates, d.gang = objs.Service, objs.ClaimTemplates, objs.Size
	d.coverage = backend.Coverage(cluster, d.gang)
	d.demands = demands
	d.verdict = capacity.Check(fleet, demands)
	return d
}

func selector(r *gpulabv1alpha1.GPURequest) capacity.Selector {
	s := capacity.Selector{Product: r.Product, DeviceClass: r.DeviceClassName}
	if r.MinMemoryMiB != nil {
		s.MinMemoryMiB = *r.MinMemoryMiB
	}
	return s
}

// resolveGPUs turns a request into a per-pod GPU count: perPod as given,
// wholeNode as the healthy GPU count of the matching nodes.
func resolveGPUs(r *gpulabv1alpha1.GPURequest, fleet []capacity.Node) int32 {
	switch {
	case r == nil:
		return 0
	case r.PerPod != nil:
		return *r.PerPod
	default:
		return capacity.WholeNodeGPUs(fleet, selector(r))
	}
}

// validateSpec catches what the schema cannot afford to check: a
// gpus.container that names no container of its template would otherwise
// put the GPUs on another container silently.
func validateSpec(cluster *gpulabv1alpha1.GPUCluster) error {
	check := func(path string, r *gpulabv1alpha1.GPURequest, t *corev1.PodTemplateSpec) error {
		if r == nil || r.Container == "" {
			return nil
		}
		var names []string
		for _, c := range t.Spec.Containers {
			if c.Name == r.Container {
				return nil
			}
			names = append(names, c.Name)
		}
		return fmt.Errorf("%s.gpus.container %q names no container of %s.template (containers: %s)", path, r.Container, path, strings.Join(names, ", "))
	}
	errs := []error{check("spec.head", cluster.Spec.Head.GPUs, &cluster.Spec.Head.Template)}
	for i := range cluster.Spec.WorkerGroups {
		wg := &cluster.Spec.WorkerGroups[i]
		errs = append(errs, check(fmt.Sprintf("spec.workerGroups[%s]", wg.Name), wg.GPUs, &wg.Template))
	}
	return errors.Join(errs...)
}

// placedWholeNodeGPUs is the GPU count of the group's live pods, for a
// wholeNode group that has any.
func placedWholeNodeGPUs(g *gang.Group, existing []corev1.Pod) (int32, bool) {
	if g.GPUs == nil || !g.GPUs.WholeNode {
		return 0, false
	}
	for i := range existing {
		p := &existing[i]
		if p.Labels[gpulabv1alpha1.GroupLabel] != g.Name || !p.DeletionTimestamp.IsZero() {
			continue
		}
		for _, c := range p.Spec.Containers {
			if q, ok := c.Resources.Requests[gfd.GPUResource]; ok && q.Value() > 0 {
				return int32(q.Value()), true
			}
		}
	}
	return 0, false
}
