package gang

import (
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
)

// BuildPod renders pod index of group g exactly as it will be created:
// its deterministic name and hostname, the cluster, group and index
// labels, the environment launchers read, the cluster's priority class,
// the group's GPUs (a request or a claim, and node affinity), the
// scheduler's decoration and the template hash.
func BuildPod(cluster *gpulabv1alpha1.GPUCluster, g *Group, index int32) *corev1.Pod {
	tmpl := g.Template.DeepCopy()
	name := PodName(cluster.Name, g.Name, index)
	labels := maps.Clone(tmpl.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[gpulabv1alpha1.ClusterLabel] = cluster.Name
	labels[gpulabv1alpha1.GroupLabel] = g.Name
	labels[gpulabv1alpha1.IndexLabel] = strconv.Itoa(int(index))
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   cluster.Namespace,
			Name:        name,
			Labels:      labels,
			Annotations: tmpl.Annotations,
		},
		Spec: tmpl.Spec,
	}
	pod.Spec.Hostname = name
	if cluster.Spec.Scheduling.PriorityClassName != "" {
		pod.Spec.PriorityClassName = cluster.Spec.Scheduling.PriorityClassName
	}
	env := []corev1.EnvVar{
		{Name: gpulabv1alpha1.EnvClusterName, Value: cluster.Name},
		{Name: gpulabv1alpha1.EnvGroup, Value: g.Name},
		{Name: gpulabv1alpha1.EnvIndex, Value: strconv.Itoa(int(index))},
		{Name: gpulabv1alpha1.EnvHeadAddress, Value: gpulabv1alpha1.HeadAddress(cluster.Name, cluster.Namespace)},
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, env...)
	}
	switch {
	case g.GPUs != nil && g.GPUs.DeviceClassName != "":
		addGPUClaim(pod, g.GPUs.Container, gpulabv1alpha1.GPUClaimTemplateName(cluster.Name, g.Name))
		addGPUAffinity(pod, g.GPUs)
	case g.GPUs != nil:
		addGPURequest(pod, g.GPUs.Container, g.GPUsPerPod)
		addGPUAffinity(pod, g.GPUs)
	}
	Decorate(pod, cluster, g.Name)
	hash := gpulabv1alpha1.PodTemplateHash(pod)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] = hash
	// After the hash: pods made before these existed are not outdated.
	for k, v := range noVoluntaryDisruption {
		if _, set := pod.Annotations[k]; !set {
			pod.Annotations[k] = v
		}
	}
	return pod
}

// noVoluntaryDisruption keeps autoscalers from evicting one member of a
// gang alone to consolidate its node: the gang would lose a member and
// its peers would wait, holding their GPUs, for a replacement.
// Karpenter's and cluster-autoscaler's own annotations, set at creation,
// cost no write; a template that sets either keeps its value. A drain
// (the eviction API) is not stopped by them: that is an administrator's
// decision.
var noVoluntaryDisruption = map[string]string{
	DoNotDisruptAnnotation: "true",
	SafeToEvictAnnotation:  "false",
}

// DoNotDisruptAnnotation is Karpenter's: a node with such a pod is not
// consolidated or expired voluntarily.
const DoNotDisruptAnnotation = "karpenter.sh/do-not-disrupt"

// SafeToEvictAnnotation is cluster-autoscaler's: "false" keeps the node
// from being scaled down while the pod runs.
const SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"

// gpuContainer is the named container, or the first when none has the
// name; nil for a pod without containers.
func gpuContainer(pod *corev1.Pod, name string) *corev1.Container {
	if len(pod.Spec.Containers) == 0 {
		return nil
	}
	target := &pod.Spec.Containers[0]
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			target = &pod.Spec.Containers[i]
		}
	}
	return target
}

// addGPURequest puts n GPUs on the named container (the first by default),
// as request and limit: extended resources need both, equal.
func addGPURequest(pod *corev1.Pod, container string, n int32) {
	target := gpuContainer(pod, container)
	if n <= 0 || target == nil {
		return
	}
	q := *resource.NewQuantity(int64(n), resource.DecimalSI)
	if target.Resources.Requests == nil {
		target.Resources.Requests = corev1.ResourceList{}
	}
	if target.Resources.Limits == nil {
		target.Resources.Limits = corev1.ResourceList{}
	}
	target.Resources.Requests[gfd.GPUResource] = q
	target.Resources.Limits[gfd.GPUResource] = q
}

// addGPUClaim gives the pod a claim from the group's ResourceClaimTemplate
// and the named container (the first by default) its use.
func addGPUClaim(pod *corev1.Pod, container, template string) {
	target := gpuContainer(pod, container)
	if target == nil {
		return
	}
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: gpulabv1alpha1.GPUClaimName, ResourceClaimTemplateName: &template})
	target.Resources.Claims = append(target.Resources.Claims, corev1.ResourceClaim{Name: gpulabv1alpha1.GPUClaimName})
}

// addGPUAffinity requires the GFD product and memory labels, ANDed into
// every required node selector term of the template.
func addGPUAffinity(pod *corev1.Pod, r *gpulabv1alpha1.GPURequest) {
	var exprs []corev1.NodeSelectorRequirement
	if r.Product != "" {
		exprs = append(exprs, corev1.NodeSelectorRequirement{Key: gfd.Product, Operator: corev1.NodeSelectorOpIn, Values: []string{r.Product}})
	}
	if r.MinMemoryMiB != nil {
		exprs = append(exprs, corev1.NodeSelectorRequirement{Key: gfd.Memory, Operator: corev1.NodeSelectorOpGt, Values: []string{strconv.FormatInt(*r.MinMemoryMiB-1, 10)}})
	}
	if len(exprs) == 0 {
		return
	}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		terms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, exprs...)
	}
	na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
}
