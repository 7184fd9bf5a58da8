package bare

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang"
)

// Labels and keys of a bare gang's objects.
const (
	// GangLabel marks a bare gang's ConfigMap, its value the gang's name:
	// the recorder watches only ConfigMaps carrying it.
	GangLabel = "conformance.gpulab.io/bare-gang"
	// PodsKey is the ConfigMap key holding the gang's desired pod count.
	PodsKey = "pods"
	// SpecKey is the ConfigMap key holding the gang's Spec as JSON.
	SpecKey = "spec"
)

// Spec is a gang as a GPUCluster's spec says it, on Volcano: Cluster
// turns it into that GPUCluster, and the children are what the operator's
// gang builder (internal/gang) makes of it. GPUs may be in the templates
// already (as a resolved perPod request: request and limit) or asked for
// per group as a GPUCluster asks.
type Spec struct {
	// Queue is the Volcano queue of the gang's PodGroup.
	Queue string `json:"queue,omitempty"`
	// PriorityClassName, when set, is the PodGroup's and every pod's.
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Head is the head pod's template: task "head", one pod.
	Head corev1.PodTemplateSpec `json:"head"`
	// HeadGPUs is the head's accelerator request, as spec.head.gpus.
	HeadGPUs *gpulabv1alpha1.GPURequest `json:"headGPUs,omitempty"`
	// Groups are the worker groups, each a task of Replicas pods.
	Groups []Group `json:"groups,omitempty"`
	// Overheads are the pod overheads of the RuntimeClasses the templates
	// name, as the operator reads them from the cluster's RuntimeClass
	// objects: only the PodGroup's minResources counts them.
	Overheads map[string]corev1.ResourceList `json:"overheads,omitempty"`
}

// Group is a worker group, as spec.workerGroups[] says it.
type Group struct {
	// Name is the group's name, its pods' task; no '-' in it (the pod
	// names rely on that, as GPUCluster worker group names do).
	Name     string `json:"name"`
	Replicas int32  `json:"replicas"`
	// MinReplicas is how many of the group's pods the gang needs; unset
	// means all of them.
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// GPUs is each pod's accelerator request: perPod only (wholeNode is
	// resolved against the fleet, which only the operator reads), as the
	// extended resource or, with deviceClassName, a DRA claim.
	GPUs     *gpulabv1alpha1.GPURequest `json:"gpus,omitempty"`
	Template corev1.PodTemplateSpec     `json:"template"`
}

// Cluster is the GPUCluster namespace/name whose spec s says, scheduled by
// Volcano: the input the operator's gang builder gets for it. A wholeNode
// GPU request is an error: only the operator resolves one.
func (s Spec) Cluster(name, namespace string) (*gpulabv1alpha1.GPUCluster, error) {
	c := &gpulabv1alpha1.GPUCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: gpulabv1alpha1.GroupVersion.String(), Kind: "GPUCluster"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Head: gpulabv1alpha1.HeadSpec{GPUs: s.HeadGPUs, Template: s.Head},
			Scheduling: gpulabv1alpha1.SchedulingSpec{Scheduler: gpulabv1alpha1.SchedulerVolcano, Queue: s.Queue,
				PriorityClassName: s.PriorityClassName},
		},
	}
	check := func(group string, r *gpulabv1alpha1.GPURequest) error {
		if r != nil && r.PerPod == nil {
			return fmt.Errorf("group %s: a bare gang's GPUs are perPod (wholeNode needs the operator's view of the fleet)", group)
		}
		return nil
	}
	errs := []error{check(gpulabv1alpha1.HeadGroupName, s.HeadGPUs)}
	for _, g := range s.Groups {
		errs = append(errs, check(g.Name, g.GPUs))
		c.Spec.WorkerGroups = append(c.Spec.WorkerGroups, gpulabv1alpha1.WorkerGroupSpec{
			Name: g.Name, Replicas: g.Replicas, MinReplicas: g.MinReplicas, GPUs: g.GPUs, Template: g.Template})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// Pods is the gang's pod count: the head and every worker.
func (s Spec) Pods() int {
	n := 1
	for _, g := range s.Groups {
		n += int(g.Replicas)
	}
	return n
}

// Object is the gang's own object: a ConfigMap named name, with labels
// and GangLabel, holding spec and its pod count. Its namespace is set by
// whoever creates it.
func Object(name string, labels map[string]string, spec Spec) *corev1.ConfigMap {
	data, err := json.Marshal(spec)
	if err != nil {
		// Templates and names always marshal; a panic is a programming error.
		panic(fmt.Sprintf("encoding bare gang %s: %v", name, err))
	}
	l := maps.Clone(labels)
	if l == nil {
		l = map[string]string{}
	}
	l[GangLabel] = name
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Data:       map[string]string{PodsKey: strconv.Itoa(spec.Pods()), SpecKey: string(data)},
	}
}

// DesiredPods is the pod count a gang's ConfigMap asks for; 0 when it is
// not a bare gang's.
func DesiredPods(cm *corev1.ConfigMap) int {
	if cm.Labels[GangLabel] == "" {
		return 0
	}
	n, err := strconv.Atoi(cm.Data[PodsKey])
	if err != nil {
		return 0
	}
	return n
}

// Children are what gpulab's operator would create for the gang.
type Children struct {
	PodGroup *schedulingv1beta1.PodGroup
	Service  *corev1.Service
	// ClaimTemplates are the DRA groups' ResourceClaimTemplates.
	ClaimTemplates []*resourceapi.ResourceClaimTemplate
	// Pods are the head and then each group's pods by index.
	Pods []*corev1.Pod
}

// ChildrenOf builds the gang's children from its created ConfigMap (its
// UID is their controller's) with the operator's gang builder: the pods,
// the PodGroup sized from them, the headless head Service and the claim
// templates, exactly as the operator builds them for the same spec.
func ChildrenOf(cm *corev1.ConfigMap) (*Children, error) {
	if cm.UID == "" {
		return nil, fmt.Errorf("ConfigMap %s has no UID: its children need the created object", cm.Name)
	}
	var spec Spec
	if err := json.Unmarshal([]byte(cm.Data[SpecKey]), &spec); err != nil {
		return nil, fmt.Errorf("ConfigMap %s is not a bare gang: %w", cm.Name, err)
	}
	cluster, err := spec.Cluster(cm.Name, cm.Namespace)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", cm.Name, err)
	}
	objs := gang.Build(cluster, gang.Groups(cluster), spec.Overheads)
	ch := &Children{PodGroup: gang.VolcanoPodGroup(cluster, objs.Size), Service: objs.Service,
		ClaimTemplates: objs.ClaimTemplates, Pods: objs.Pods}
	owner := *metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	owned := []metav1.Object{ch.PodGroup, ch.Service}
	for _, t := range ch.ClaimTemplates {
		owned = append(owned, t)
	}
	for _, p := range ch.Pods {
		owned = append(owned, p)
	}
	for _, o := range owned {
		o.SetOwnerReferences([]metav1.OwnerReference{owner})
	}
	return ch, nil
}
