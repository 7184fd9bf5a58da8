package measure

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/bare"
)

// Workload is one kind of gang the recorder can follow: gpulab's
// GPUCluster, KubeRay's RayCluster, a Volcano Job or the suite's own bare
// gang. Pods and PodGroups
// belong to the gang their controller owner reference names, so every
// detector and milestone works the same for all of them.
type Workload interface {
	// Object is an empty object of the workload's type, for the watch.
	Object() client.Object
	// Kind is the kind in its children's owner references.
	Kind() string
	// Read says what a workload object asks for and says of itself.
	Read(obj client.Object) WorkloadState
	// Slot names a pod's place in its gang (gang/group/index where the
	// workload has stable places), so two live pods in one are duplicates.
	Slot(gang string, p *corev1.Pod) string
}

// WorkloadState is what a workload object says.
type WorkloadState struct {
	// Desired is the pods its gang asks for.
	Desired int
	// Ready is its own status saying the gang is ready (the StatusReady
	// milestone).
	Ready bool
	// ReadyAt is when the status says it became Ready, where it records
	// that (gpulab's status.readyTime); zero otherwise.
	ReadyAt time.Time
	// Claim says the status is a Ready claim the suite holds to the pods:
	// gpulab's Ready means every pod is Ready. KubeRay's and Volcano's
	// states promise less (running, not Ready), so they are not judged.
	Claim bool
}

// SelectedWorkload is a Workload whose objects are a labelled few of
// their type (the bare gangs' ConfigMaps): the recorder watches only
// those Selector matches, not every object of the type.
type SelectedWorkload interface {
	Workload
	Selector() labels.Selector
}

// watchedByObject is the recorder cache's per-object settings: the
// workload's selector, where it has one.
func watchedByObject(w Workload) map[client.Object]cache.ByObject {
	s, ok := w.(SelectedWorkload)
	if !ok {
		return nil
	}
	return map[client.Object]cache.ByObject{w.Object(): {Label: s.Selector()}}
}

// gangOf is the name of obj's controller of the given kind, or "".
func gangOf(obj metav1.Object, kind string) string {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == kind {
		return ref.Name
	}
	return ""
}

// GPUClusters follows gpulab's GPUClusters.
type GPUClusters struct{}

// Object is a GPUCluster.
func (GPUClusters) Object() client.Object { return &gpulabv1alpha1.GPUCluster{} }

// Kind is GPUCluster.
func (GPUClusters) Kind() string { return "GPUCluster" }

// Read counts the head and the worker groups' replicas; Ready is the phase
// and a claim the suite holds to the pods.
func (GPUClusters) Read(obj client.Object) WorkloadState {
	gc, ok := obj.(*gpulabv1alpha1.GPUCluster)
	if !ok {
		return WorkloadState{}
	}
	desired := 1
	for _, g := range gc.Spec.WorkerGroups {
		desired += int(g.Replicas)
	}
	claims := gc.Status.Phase == gpulabv1alpha1.ClusterReady || isConditionTrue(gc.Status.Conditions, gpulabv1alpha1.ConditionReady)
	st := WorkloadState{Desired: desired, Ready: gc.Status.Phase == gpulabv1alpha1.ClusterReady, Claim: claims}
	if st.Ready {
		st.ReadyAt = readyConditionSince(gc.Status.Conditions)
	}
	return st
}

// Slot is gang/group/index, from the labels the operator sets.
func (GPUClusters) Slot(gang string, p *corev1.Pod) string {
	return gang + "/" + p.Labels[gpulabv1alpha1.GroupLabel] + "/" + p.Labels[gpulabv1alpha1.IndexLabel]
}

// VolcanoJobs follows Volcano's batch.volcano.sh Jobs: Ready is the job
// Running (the suite also waits for every pod Ready).
type VolcanoJobs struct{}

// Object is a Volcano Job.
func (VolcanoJobs) Object() client.Object { return &batchv1alpha1.Job{} }

// Kind is Job (of batch.volcano.sh).
func (VolcanoJobs) Kind() string { return "Job" }

// Read counts the tasks' replicas; Ready is the job Running.
func (VolcanoJobs) Read(obj client.Object) WorkloadState {
	j, ok := obj.(*batchv1alpha1.Job)
	if !ok {
		return WorkloadState{}
	}
	desired := 0
	for _, t := range j.Spec.Tasks {
		desired += int(t.Replicas)
	}
	return WorkloadState{Desired: desired, Ready: j.Status.State.Phase == batchv1alpha1.Running}
}

// Slot is gang/task/index, from the annotations Volcano's job controller
// sets.
func (VolcanoJobs) Slot(gang string, p *corev1.Pod) string {
	return gang + "/" + p.Annotations[batchv1alpha1.TaskSpecKey] + "/" + p.Annotations[batchv1alpha1.TaskIndex]
}

// BareGangs follows the suite's own gangs (package bare): a ConfigMap per
// gang, controlling a PodGroup, a Service and the pods the suite creates
// as gpulab's operator would. The floor writes each ConfigMap once when
// the gang's pods are all Ready (bare.StatusKey): that write is its status
// Ready, and a claim held to the pods as gpulab's is.
type BareGangs struct{}

var _ SelectedWorkload = BareGangs{}

// Object is a ConfigMap.
func (BareGangs) Object() client.Object { return &corev1.ConfigMap{} }

// Kind is ConfigMap.
func (BareGangs) Kind() string { return "ConfigMap" }

// Read is the desired pod count the ConfigMap carries and the status the
// floor wrote on it, with the time it wrote in it.
func (BareGangs) Read(obj client.Object) WorkloadState {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return WorkloadState{}
	}
	ready, at := bare.Status(cm)
	return WorkloadState{Desired: bare.DesiredPods(cm), Ready: ready, ReadyAt: at, Claim: ready}
}

// Slot is gang/group/index, from the labels the suite sets as the
// operator does.
func (BareGangs) Slot(gang string, p *corev1.Pod) string { return GPUClusters{}.Slot(gang, p) }

// Selector is the ConfigMaps carrying bare.GangLabel.
func (BareGangs) Selector() labels.Selector {
	req, err := labels.NewRequirement(bare.GangLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid key
	}
	return labels.NewSelector().Add(*req)
}

// RayClusterGVK is KubeRay's RayCluster, followed as unstructured: the
// suite needs a handful of fields, not KubeRay's types.
var RayClusterGVK = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayCluster"}

// RayClusters follows KubeRay's RayClusters: Ready is status.state ready.
type RayClusters struct{}

// Object is an unstructured RayCluster.
func (RayClusters) Object() client.Object {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(RayClusterGVK)
	return u
}

// Kind is RayCluster.
func (RayClusters) Kind() string { return RayClusterGVK.Kind }

// Read counts the head and the worker groups' replicas; Ready is
// status.state ready.
func (RayClusters) Read(obj client.Object) WorkloadState {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return WorkloadState{}
	}
	desired := 1 // the head
	groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "workerGroupSpecs")
	for _, g := range groups {
		if m, ok := g.(map[string]any); ok {
			n, _, _ := unstructured.NestedInt64(m, "replicas")
			desired += int(n)
		}
	}
	state, _, _ := unstructured.NestedString(u.Object, "status", "state")
	return WorkloadState{Desired: desired, Ready: state == "ready"}
}

// Slot is the pod's own name: KubeRay names worker pods with random
// suffixes, so a RayCluster has no stable places to hold twice.
func (RayClusters) Slot(gang string, p *corev1.Pod) string { return gang + "/" + p.Name }

// readyConditionSince is when the Ready condition turned True: the
// status's own time for status Ready (readyTime is the pods', not the
// status's).
func readyConditionSince(conds []metav1.Condition) time.Time {
	for _, c := range conds {
		if c.Type == gpulabv1alpha1.ConditionReady && c.Status == metav1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func isConditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
