package measure

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Small readings of a pod's status.

// inGang says whether a pod names a PodGroup: Volcano's by the
// scheduling.k8s.io/group-name annotation, Kubernetes' own by
// spec.schedulingGroup.
func inGang(p *corev1.Pod) bool {
	return p.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey] != "" ||
		(p.Spec.SchedulingGroup != nil && p.Spec.SchedulingGroup.PodGroupName != nil)
}

// conditionTrueSince is the lastTransitionTime of a True condition of the
// pod, zero if it is not True.
func conditionTrueSince(p *corev1.Pod, typ corev1.PodConditionType) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// unschedulableMark is the PodScheduled=False/Unschedulable condition as
// the scheduler wrote it (reason, message and times), or "".
func unschedulableMark(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return fmt.Sprintf("%s (%s, probed %s)", c.Message, c.LastTransitionTime.UTC().Format(time.RFC3339), c.LastProbeTime.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
