package gpucluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/operator/internal/capacity"
	"github.com/gpulab/gpulab/operator/internal/scheduler"
	"github.com/gpulab/gpulab/operator/internal/sizing"
)

// group is one group of identical pods as resolved for this reconcile.
type group struct {
	name       string
	replicas   int32
	min        int32
	gpus       *gpulabv1alpha1.GPURequest
	gpusPerPod int32
	template   *corev1.PodTemplateSpec
}

// desiredState is everything a reconcile wants to exist, built in memory
// from the spec and the capacity view before anything is written.
type desiredState struct {
	groups  []group
	pods    map[string]*corev1.Pod // by name
	service *corev1.Service
	// claimTemplates are the DRA groups' ResourceClaimTemplates.
	claimTemplates []*resourceapi.ResourceClaimTemplate
	gang           sizing.GangSize
	// coverage is what the scheduler's gang object makes of gang.
	coverage scheduler.Coverage
	verdict  capacity.Verdict
}

// podName is the deterministic name of a pod of group g.
func podName(cluster string, g string, index int32) string {
	if g == gpulabv1alpha1.HeadGroupName {
		return gpulabv1alpha1.HeadPodName(cluster)
	}
	return gpulabv1alpha1.WorkerPodName(cluster, g, index)
}

// buildDesired resolves GPU requests against capacity, builds every pod as
// it will be created, sizes the gang from those pods and checks it fits.
// overheads maps RuntimeClass names to their pod overhead; existing are the
// cluster's pods, whose wholeNode GPU counts replacements keep.
func buildDesired(cluster *gpulabv1alpha1.GPUCluster, fleet []capacity.Node, overheads map[string]corev1.ResourceList, gang scheduler.Backend, existing []corev1.Pod) *desiredState {
	d := &desiredState{pods: map[string]*corev1.Pod{}}
	d.groups = append(d.groups, group{
		name: gpulabv1alpha1.HeadGroupName, replicas: 1, min: 1,
		gpus: cluster.Spec.Head.GPUs, template: &cluster.Spec.Head.Template,
	})
	for i := range cluster.Spec.WorkerGroups {
		wg := &cluster.Spec.WorkerGroups[i]
		minimum := wg.Replicas
		if wg.MinReplicas != nil {
			minimum = *wg.MinReplicas
		}
		d.groups = append(d.groups, group{name: wg.Name, replicas: wg.Replicas, min: minimum, gpus: wg.GPUs, template: &wg.Template})
	}

	var members []sizing.Member
	var demands []capacity.Demand
	for i := range d.groups {
		g := &d.groups[i]
		g.gpusPerPod = resolveGPUs(g.gpus, fleet)
		if n, ok := placedWholeNodeGPUs(g, existing); ok {
			// Fixed at gang creation: a replacement matches its peers even
			// if a GPU of the fleet has turned sick since.
			g.gpusPerPod = n
		}
		if g.gpus != nil {
			demands = append(demands, capacity.Demand{Group: g.name, Selector: selector(g.gpus), GPUsPerPod: g.gpusPerPod, Pods: g.min})
			if g.gpusPerPod == 0 {
				// wholeNode with no matching node: Check reports it.
				demands[len(demands)-1].GPUsPerPod = 1
			}
		}
		var sample *corev1.Pod
		for idx := range g.replicas {
			pod := buildPod(cluster, g, idx, gang)
			d.pods[pod.Name] = pod
			if sample == nil {
				sample = pod
			}
		}
		if sample == nil {
			sample = buildPod(cluster, g, 0, gang)
		}
		if g.gpus != nil && g.gpus.DeviceClassName != "" {
			d.claimTemplates = append(d.claimTemplates, buildClaimTemplate(cluster, g))
		}
		sample = withOverhead(sample, overheads)
		members = append(members, sizing.Member{Task: g.name, Pod: sample, Min: g.min, Count: g.replicas})
	}
	d.gang = sizing.ForMembers(members)
	d.coverage = gang.Coverage(cluster, d.gang)
	d.verdict = capacity.Check(fleet, demands)
	d.service = buildHeadService(cluster)
	return d
}

// withOverhead returns the pod as admission will store it: with its
// RuntimeClass's overhead. Only the sizing copy gets it; the API server
// rejects pods that set overhead themselves.
func withOverhead(pod *corev1.Pod, overheads map[string]corev1.ResourceList) *corev1.Pod {
	name := pod.Spec.RuntimeClassName
	if name == nil || overheads[*name] == nil {
		return pod
	}
	sized := pod.DeepCopy()
	sized.Spec.Overhead = overheads[*name].DeepCopy()
	return sized
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
func placedWholeNodeGPUs(g *group, existing []corev1.Pod) (int32, bool) {
	if g.gpus == nil || !g.gpus.WholeNode {
		return 0, false
	}
	for i := range existing {
		p := &existing[i]
		if p.Labels[gpulabv1alpha1.GroupLabel] != g.name || !p.DeletionTimestamp.IsZero() {
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

// buildPod renders one pod of a group exactly as it will be created.
func buildPod(cluster *gpulabv1alpha1.GPUCluster, g *group, index int32, gang scheduler.Backend) *corev1.Pod {
	tmpl := g.template.DeepCopy()
	name := podName(cluster.Name, g.name, index)
	labels := map[string]string{}
	for k, v := range tmpl.Labels {
		labels[k] = v
	}
	labels[gpulabv1alpha1.ClusterLabel] = cluster.Name
	labels[gpulabv1alpha1.GroupLabel] = g.name
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
		{Name: gpulabv1alpha1.EnvGroup, Value: g.name},
		{Name: gpulabv1alpha1.EnvIndex, Value: strconv.Itoa(int(index))},
		{Name: gpulabv1alpha1.EnvHeadAddress, Value: gpulabv1alpha1.HeadAddress(cluster.Name, cluster.Namespace)},
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, env...)
	}
	switch {
	case g.gpus != nil && g.gpus.DeviceClassName != "":
		addGPUClaim(pod, g.gpus.Container, gpulabv1alpha1.GPUClaimTemplateName(cluster.Name, g.name))
		addGPUAffinity(pod, g.gpus)
	case g.gpus != nil:
		addGPURequest(pod, g.gpus.Container, g.gpusPerPod)
		addGPUAffinity(pod, g.gpus)
	}
	gang.Decorate(pod, cluster, g.name)
	hash := gpulabv1alpha1.PodTemplateHash(pod)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation] = hash
	return pod
}

// addGPURequest puts n GPUs on the named container (the first by default),
// as request and limit: extended resources need both, equal.
func addGPURequest(pod *corev1.Pod, container string, n int32) {
	if n <= 0 || len(pod.Spec.Containers) == 0 {
		return
	}
	target := &pod.Spec.Containers[0]
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == container {
			target = &pod.Spec.Containers[i]
		}
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
	if len(pod.Spec.Containers) == 0 {
		return
	}
	target := &pod.Spec.Containers[0]
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == container {
			target = &pod.Spec.Containers[i]
		}
	}
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: gpulabv1alpha1.GPUClaimName, ResourceClaimTemplateName: &template})
	target.Resources.Claims = append(target.Resources.Claims, corev1.ResourceClaim{Name: gpulabv1alpha1.GPUClaimName})
}

// buildClaimTemplate is a DRA group's ResourceClaimTemplate: exactly
// perPod devices of its DeviceClass that pass its selectors, for each pod.
func buildClaimTemplate(cluster *gpulabv1alpha1.GPUCluster, g *group) *resourceapi.ResourceClaimTemplate {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: g.gpus.DeviceClassName,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(g.gpusPerPod)}
	for _, expr := range g.gpus.Selectors {
		req.Selectors = append(req.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: gpulabv1alpha1.GPUClaimTemplateName(cluster.Name, g.name),
			Labels: map[string]string{gpulabv1alpha1.ClusterLabel: cluster.Name, gpulabv1alpha1.GroupLabel: g.name}},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: gpulabv1alpha1.GPUClaimName, Exactly: req}},
		}}},
	}
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

// buildHeadService is a headless Service for the head pod. It publishes the
// head's address before the head is Ready, because workers rendezvous with
// it while it starts.
func buildHeadService(cluster *gpulabv1alpha1.GPUCluster) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      gpulabv1alpha1.HeadServiceName(cluster.Name),
			Labels:    map[string]string{gpulabv1alpha1.ClusterLabel: cluster.Name},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector: map[string]string{
				gpulabv1alpha1.ClusterLabel: cluster.Name,
				gpulabv1alpha1.GroupLabel:   gpulabv1alpha1.HeadGroupName,
			},
		},
	}
	svc.Spec.Ports = gpulabv1alpha1.HeadServicePorts(cluster.Spec.Head.Template.Spec.Containers)
	return svc
}
