// Package sizing computes a gang's PodGroup sizing — minMember,
// minTaskMember and minResources — from the pods exactly as they will be
// created. Each pod counts with its effective request by the Kubernetes
// rule (app containers plus restartable sidecars, the largest init phase,
// pod overhead, pod-level resources), so the queue admits a gang only when
// its real footprint fits; summing container templates alone under-counts.
// It is the arithmetic under package gang, which gpulab's operator and the
// suite's no-operator floor (conformance/bare) both build gangs with.
package sizing

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Member is one task of a gang: Count identical pods shaped like Pod, of
// which Min must run for the gang to start.
type Member struct {
	// Task names the pods' task (Volcano's volcano.sh/task-spec).
	Task string
	// Pod is one of the task's pods as it will be created.
	Pod *corev1.Pod
	// Min is how many of the task's pods the gang needs.
	Min int32
	// Count is how many pods the task has. Values below Min (zero
	// included) mean Min: the task has no pods beyond those it needs.
	Count int32
}

// GangSize is a PodGroup's sizing.
type GangSize struct {
	// MinMember is the number of pods that must be schedulable together.
	MinMember int32
	// MinTaskMember is MinMember split by task, so the gang cannot be
	// satisfied by the wrong mix of pods.
	MinTaskMember map[string]int32
	// MinResources is the sum of the effective requests of those pods.
	MinResources corev1.ResourceList
	// TaskCount is how many pods each task has, tasks with Min 0 included.
	TaskCount map[string]int32
}

// ForMembers sizes a gang. MinMember, MinTaskMember and MinResources always
// describe the same set of pods. Tasks with Min 0 are left out of
// MinTaskMember, as Volcano expects.
func ForMembers(members []Member) GangSize {
	g := GangSize{MinTaskMember: map[string]int32{}, MinResources: corev1.ResourceList{}, TaskCount: map[string]int32{}}
	for _, m := range members {
		g.TaskCount[m.Task] += max(m.Count, m.Min, 0)
		if m.Min <= 0 {
			continue
		}
		g.MinMember += m.Min
		g.MinTaskMember[m.Task] += m.Min
		for name, q := range EffectiveRequest(m.Pod) {
			total := g.MinResources[name]
			total.Add(multiply(q, int64(m.Min)))
			g.MinResources[name] = total
		}
	}
	return g
}

// TaskMinimumsImplied says whether every set of MinMember of the gang's
// pods holds MinTaskMember of each task, so that a scheduler that counts
// only pods (kube-scheduler's gang minCount) still enforces the per-task
// minimums. The worst mix takes every pod of the other tasks first, which
// leaves task t MinMember - (all pods - t's pods); that reaches t's
// minimum exactly when every other task needs all of its pods. So the
// minimums are implied unless a task needs pods while another task has
// pods it does not need (an elastic group, minReplicas < replicas, or a
// group with minReplicas 0).
func (g GangSize) TaskMinimumsImplied() bool {
	for t, need := range g.MinTaskMember {
		if need <= 0 {
			continue
		}
		for other, count := range g.TaskCount {
			if other != t && g.MinTaskMember[other] < count {
				return false
			}
		}
	}
	return true
}

// EffectiveRequest is what the scheduler reserves for pod: the Kubernetes
// effective request (max of the app phase and each init phase, restartable
// sidecars counted in both, plus overhead and pod-level requests). A
// container's limits stand in for unset requests, as API defaulting does.
func EffectiveRequest(pod *corev1.Pod) corev1.ResourceList {
	p := pod.DeepCopy()
	for i := range p.Spec.InitContainers {
		defaultRequestsFromLimits(&p.Spec.InitContainers[i])
	}
	for i := range p.Spec.Containers {
		defaultRequestsFromLimits(&p.Spec.Containers[i])
	}
	reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	// Drop zero quantities so equal requests compare equal however built.
	for _, name := range slices.Collect(maps.Keys(reqs)) {
		if q := reqs[name]; q.IsZero() {
			delete(reqs, name)
		}
	}
	return reqs
}

func defaultRequestsFromLimits(c *corev1.Container) {
	for name, limit := range c.Resources.Limits {
		if _, set := c.Resources.Requests[name]; set {
			continue
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Requests[name] = limit.DeepCopy()
	}
}

// multiply returns q×n without the rounding of Quantity.Mul on milli-values.
func multiply(q resource.Quantity, n int64) resource.Quantity {
	out := q.DeepCopy()
	out.Mul(n)
	return out
}
