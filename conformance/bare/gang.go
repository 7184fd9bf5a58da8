package bare

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// Labels, keys and names of a bare gang's objects.
const (
	// GangLabel marks a bare gang's ConfigMap, its value the gang's name:
	// the recorder watches only ConfigMaps carrying it.
	GangLabel = "conformance.gpulab.io/bare-gang"
	// PodsKey is the ConfigMap key holding the gang's desired pod count.
	PodsKey = "pods"
	// SpecKey is the ConfigMap key holding the gang's Spec as JSON.
	SpecKey = "spec"
	// SchedulerName is the schedulerName of the gang's pods (Volcano's).
	SchedulerName = "volcano"
	// TaskAnnotation names a pod's task for the PodGroup's minTaskMember.
	TaskAnnotation = "volcano.sh/task-spec"
)

// Spec is a gang as a GPUCluster's spec says it, with GPUs already in the
// templates (the operator's perPod request resolved: request and limit).
type Spec struct {
	// Queue is the Volcano queue of the gang's PodGroup.
	Queue string `json:"queue,omitempty"`
	// PriorityClassName, when set, is the PodGroup's and every pod's.
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Head is the head pod's template: task "head", one pod.
	Head corev1.PodTemplateSpec `json:"head"`
	// Groups are the worker groups, each a task of Replicas pods.
	Groups []Group `json:"groups,omitempty"`
}

// Group is a worker group: Replicas pods from Template, all needed.
type Group struct {
	// Name is the group's name, its pods' task; no '-' in it (the pod
	// names rely on that, as GPUCluster worker group names do).
	Name     string                 `json:"name"`
	Replicas int32                  `json:"replicas"`
	Template corev1.PodTemplateSpec `json:"template"`
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
	// Pods are the head and then each group's pods by index.
	Pods []*corev1.Pod
}

// task is one group of identical pods: the head or a worker group.
type task struct {
	name     string
	replicas int32
	template *corev1.PodTemplateSpec
}

// ChildrenOf builds the gang's children from its created ConfigMap (its
// UID is their controller's): pods as the operator renders them, a
// PodGroup sized from those pods, and the headless head Service.
func ChildrenOf(cm *corev1.ConfigMap) (*Children, error) {
	if cm.UID == "" {
		return nil, fmt.Errorf("ConfigMap %s has no UID: its children need the created object", cm.Name)
	}
	var spec Spec
	if err := json.Unmarshal([]byte(cm.Data[SpecKey]), &spec); err != nil {
		return nil, fmt.Errorf("ConfigMap %s is not a bare gang: %w", cm.Name, err)
	}
	tasks := []task{{name: gpulabv1alpha1.HeadGroupName, replicas: 1, template: &spec.Head}}
	for i := range spec.Groups {
		g := &spec.Groups[i]
		tasks = append(tasks, task{name: g.Name, replicas: g.Replicas, template: &g.Template})
	}
	owner := *metav1.NewControllerRef(cm, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	ch := &Children{}
	var members []member
	for i := range tasks {
		t := &tasks[i]
		for idx := range t.replicas {
			pod := buildPod(cm.Name, cm.Namespace, spec.PriorityClassName, t, idx)
			pod.OwnerReferences = []metav1.OwnerReference{owner}
			ch.Pods = append(ch.Pods, pod)
		}
		if t.replicas > 0 {
			members = append(members, member{task: t.name, pod: ch.Pods[len(ch.Pods)-1], count: t.replicas})
		}
	}
	ch.PodGroup = buildPodGroup(cm.Name, cm.Namespace, spec, members)
	ch.PodGroup.OwnerReferences = []metav1.OwnerReference{owner}
	ch.Service = buildHeadService(cm.Name, cm.Namespace, &spec.Head)
	ch.Service.OwnerReferences = []metav1.OwnerReference{owner}
	return ch, nil
}

// buildPod renders one pod of a task as the operator's buildPod does:
// deterministic name and hostname, the cluster/group/index labels, the
// environment launchers read, Volcano's scheduler and group annotations,
// and the template hash.
func buildPod(gang, namespace, priorityClass string, t *task, index int32) *corev1.Pod {
	tmpl := t.template.DeepCopy()
	name := gpulabv1alpha1.WorkerPodName(gang, t.name, index)
	if t.name == gpulabv1alpha1.HeadGroupName {
		name = gpulabv1alpha1.HeadPodName(gang)
	}
	labels := maps.Clone(tmpl.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[gpulabv1alpha1.ClusterLabel] = gang
	labels[gpulabv1alpha1.GroupLabel] = t.name
	labels[gpulabv1alpha1.IndexLabel] = strconv.Itoa(int(index))
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, Annotations: tmpl.Annotations},
		Spec:       tmpl.Spec,
	}
	pod.Spec.Hostname = name
	if priorityClass != "" {
		pod.Spec.PriorityClassName = priorityClass
	}
	env := []corev1.EnvVar{
		{Name: gpulabv1alpha1.EnvClusterName, Value: gang},
		{Name: gpulabv1alpha1.EnvGroup, Value: t.name},
		{Name: gpulabv1alpha1.EnvIndex, Value: strconv.Itoa(int(index))},
		{Name: gpulabv1alpha1.EnvHeadAddress, Value: gpulabv1alpha1.HeadAddress(gang, namespace)},
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, env...)
	}
	pod.Spec.SchedulerName = SchedulerName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey] = gpulabv1alpha1.PodGroupName(gang)
	pod.Annotations[TaskAnnotation] = t.name
	pod.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] = gpulabv1alpha1.PodTemplateHash(pod)
	return pod
}

// member is count pods of one task shaped like pod, all of them needed.
type member struct {
	task  string
	pod   *corev1.Pod
	count int32
}

// buildPodGroup is the gang's Volcano PodGroup, sized as the operator's
// sizing package sizes it: every pod needed (minMember), per task
// (minTaskMember), and the sum of their effective requests (minResources).
func buildPodGroup(gang, namespace string, spec Spec, members []member) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{
		TypeMeta: metav1.TypeMeta{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: gpulabv1alpha1.PodGroupName(gang),
			Labels: map[string]string{gpulabv1alpha1.ClusterLabel: gang}},
		Spec: schedulingv1beta1.PodGroupSpec{
			MinTaskMember:     map[string]int32{},
			Queue:             spec.Queue,
			PriorityClassName: spec.PriorityClassName,
			MinResources:      &corev1.ResourceList{},
		},
	}
	for _, m := range members {
		pg.Spec.MinMember += m.count
		pg.Spec.MinTaskMember[m.task] += m.count
		for name, q := range effectiveRequest(m.pod) {
			total, n := (*pg.Spec.MinResources)[name], q.DeepCopy()
			n.Mul(int64(m.count))
			total.Add(n)
			(*pg.Spec.MinResources)[name] = total
		}
	}
	return pg
}

// effectiveRequest is what the scheduler reserves for pod, by the
// Kubernetes rule (the operator's sizing.EffectiveRequest): limits stand
// in for unset requests, then app and init phases, sidecars and pod-level
// resources; zero quantities are dropped.
func effectiveRequest(pod *corev1.Pod) corev1.ResourceList {
	p := pod.DeepCopy()
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
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
	}
	reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	for _, name := range slices.Collect(maps.Keys(reqs)) {
		if q := reqs[name]; q.IsZero() {
			delete(reqs, name)
		}
	}
	return reqs
}

// buildHeadService is the operator's headless head Service: published
// before the head is Ready (workers rendezvous with it while it starts),
// selecting the head by the cluster and group labels.
func buildHeadService(gang, namespace string, head *corev1.PodTemplateSpec) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: gpulabv1alpha1.HeadServiceName(gang),
			Labels: map[string]string{gpulabv1alpha1.ClusterLabel: gang}},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 map[string]string{gpulabv1alpha1.ClusterLabel: gang, gpulabv1alpha1.GroupLabel: gpulabv1alpha1.HeadGroupName},
			Ports:                    gpulabv1alpha1.HeadServicePorts(head.Spec.Containers),
		},
	}
}
