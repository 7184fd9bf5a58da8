package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sschedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/bare"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/testbeds/local"
)

// gangWorkload is the kind of gang the scenarios create (--workload):
// gpulab's GPUCluster, KubeRay's RayCluster, a Volcano Job or the suite's
// own bare gang. Each gang is a head without GPUs and groups of worker
// pods; the recorder follows its pods and PodGroup by owner reference, so
// every detector and milestone is the same for all four.
type gangWorkload interface {
	// recorded is how the recorder follows it.
	recorded() measure.Workload
	// build makes the gang's object, placed in the footprint.
	build(name string, groups []workerGroup) client.Object
	// describe is the object's state, for failure messages.
	describe(ctx context.Context, s *scenario, name string) string
}

// selfReconciled is a workload the suite reconciles itself, as an operator
// would: the bare workload, the ideal operator the floor is.
type selfReconciled interface {
	// reconcile starts reconciling the scenario's namespace (watches) for
	// as long as the scenario lasts.
	reconcile(ctx context.Context, s *scenario) error
	// created reacts to one gang's object as the API server returned it.
	// In a burst it runs on a goroutine of its own per gang, outside the
	// create slots (cleanup.CreateAll), as an unbounded operator would.
	created(ctx context.Context, s *scenario, obj client.Object) error
}

// workerGroup is n pods of gpus GPUs each (0: CPU only).
type workerGroup struct {
	name    string
	n, gpus int32
}

// workloads are the --workload values.
var workloads = map[string]gangWorkload{
	"gpucluster": gpuClusters{},
	"raycluster": rayClusters{},
	"vcjob":      volcanoJobs{},
	"bare":       bareGangs{},
}

// workload is the run's.
func workload() gangWorkload { return workloads[opts.Workload] }

// gpulabOnly skips an assessment that checks gpulab's own operator when
// the run measures another workload.
func gpulabOnly(t *testing.T, what string) {
	t.Helper()
	switch opts.Workload {
	case "gpucluster":
	case "bare":
		skipf(t, "%s needs gpulab's operator, and --workload=bare runs without one", what)
	default:
		skipf(t, "%s is gpulab's own (--workload=%s)", what, opts.Workload)
	}
}

// gangReady is the workload's Ready: its own status says so and the suite
// saw every pod Ready.
func gangReady(tl measure.Timeline) bool { return !tl.StatusReady.IsZero() && !tl.PodsReady.IsZero() }

// podTemplate is a workload pod: --image, a small CPU request, and gpus
// GPUs, pinned to the footprint. It carries the run's label, which every
// workload's operator copies to its pods: the run's cleanup and its pod
// counts select them by it, never a whole namespace's or cluster's pods.
func podTemplate(container string, gpus int32) corev1.PodTemplateSpec {
	ctr := corev1.Container{Name: container, Image: opts.Image, Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}
	if gpus > 0 {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		ctr.Resources.Requests[gfd.GPUResource] = q
		ctr.Resources.Limits = corev1.ResourceList{gfd.GPUResource: q}
	}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: runLabels()}, Spec: corev1.PodSpec{Containers: []corev1.Container{ctr}}}
	placePod(&tmpl.Spec, "")
	return tmpl
}

type gpuClusters struct{}

func (gpuClusters) recorded() measure.Workload { return measure.GPUClusters{} }

func (gpuClusters) build(name string, groups []workerGroup) client.Object {
	gc := &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	gc.Spec.Head.Template = podTemplate("head", 0)
	for _, g := range groups {
		wg := gpulabv1alpha1.WorkerGroupSpec{Name: g.name, Replicas: g.n, Template: podTemplate("worker", 0)}
		if g.gpus > 0 {
			wg.GPUs = &gpulabv1alpha1.GPURequest{PerPod: new(g.gpus)}
			if draMode() {
				wg.GPUs.DeviceClassName = opts.DeviceClass
			}
		}
		gc.Spec.WorkerGroups = append(gc.Spec.WorkerGroups, wg)
	}
	gc.Spec.Scheduling.Queue = fp.queue
	if nativeGangs() {
		// Kubernetes' gangs have no queues.
		gc.Spec.Scheduling.Scheduler, gc.Spec.Scheduling.Queue = gpulabv1alpha1.SchedulerKubernetes, ""
	}
	return gc
}

func (gpuClusters) describe(ctx context.Context, s *scenario, name string) string {
	return describe(s.get(ctx, name))
}

type volcanoJobs struct{}

func (volcanoJobs) recorded() measure.Workload { return measure.VolcanoJobs{} }

func (volcanoJobs) build(name string, groups []workerGroup) client.Object {
	tasks := []batchv1alpha1.TaskSpec{{Name: "head", Replicas: 1, Template: podTemplate("head", 0)}}
	for _, g := range groups {
		tasks = append(tasks, batchv1alpha1.TaskSpec{Name: g.name, Replicas: g.n, Template: podTemplate("worker", g.gpus)})
	}
	return volcanoJob(name, fp.queue, tasks)
}

// volcanoJob is a Volcano Job of tasks in queue, the whole job its gang.
func volcanoJob(name, queue string, tasks []batchv1alpha1.TaskSpec) *batchv1alpha1.Job {
	total := int32(0)
	for _, t := range tasks {
		total += t.Replicas
	}
	return &batchv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1alpha1.JobSpec{SchedulerName: "volcano", Queue: queue, MinAvailable: plantedMinAvailable(total),
			Tasks: tasks},
	}
}

func (volcanoJobs) describe(ctx context.Context, s *scenario, name string) string {
	var j batchv1alpha1.Job
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &j); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("job phase %q, %d pending, %d running; %s", j.Status.State.Phase, j.Status.Pending, j.Status.Running,
		describePodGroup(ctx, s, name))
}

// describePodGroup is the gang's PodGroup phase and conditions: a Volcano
// Job creates no pod before its PodGroup is Inqueue, so a gang without pods
// is told apart by whether the scheduler admitted it and why not.
func describePodGroup(ctx context.Context, s *scenario, gang string) string {
	if nativeGangs() {
		pg, err := nativePodGroupOf(ctx, s, gang)
		if err != nil {
			return "PodGroup: " + err.Error()
		}
		desc := fmt.Sprintf("PodGroup %s (scheduling.k8s.io)", pg.Name)
		for _, c := range pg.Status.Conditions {
			desc += fmt.Sprintf(", %s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
		}
		return desc
	}
	pg, err := podGroupOf(ctx, s, gang)
	if err != nil {
		return "PodGroup: " + err.Error()
	}
	desc := fmt.Sprintf("PodGroup %s phase %q", pg.Name, pg.Status.Phase)
	for _, c := range pg.Status.Conditions {
		desc += fmt.Sprintf(", %s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
	}
	return desc
}

type rayClusters struct{}

func (rayClusters) recorded() measure.Workload { return measure.RayClusters{} }

// build is a RayCluster in the run's queue (KubeRay started with
// --batch-scheduler=volcano gives every RayCluster a PodGroup), with
// autoscaling off so the gang is the spec's replicas.
func (rayClusters) build(name string, groups []workerGroup) client.Object {
	var workers []rayWorkers
	for _, g := range groups {
		workers = append(workers, rayWorkers{g.name, g.n, podTemplate("ray-worker", g.gpus)})
	}
	return rayCluster(name, fp.queue, podTemplate("ray-head", 0), workers)
}

// rayWorkers is a RayCluster's worker group: its replicas, fixed.
type rayWorkers struct {
	name     string
	replicas int32
	template corev1.PodTemplateSpec
}

// rayCluster is a RayCluster in queue with autoscaling off, so the gang is
// the spec's replicas.
func rayCluster(name, queue string, head corev1.PodTemplateSpec, groups []rayWorkers) *unstructured.Unstructured {
	tmpl := func(t corev1.PodTemplateSpec) map[string]any {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&t)
		if err != nil {
			panic(err) // a PodTemplateSpec always converts
		}
		return m
	}
	var workers []any
	for _, g := range groups {
		workers = append(workers, map[string]any{
			"groupName": g.name, "replicas": int64(g.replicas), "minReplicas": int64(g.replicas), "maxReplicas": int64(g.replicas),
			"rayStartParams": map[string]any{}, "template": tmpl(g.template),
		})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"headGroupSpec":    map[string]any{"rayStartParams": map[string]any{}, "template": tmpl(head)},
			"workerGroupSpecs": workers,
		},
	}}
	u.SetGroupVersionKind(measure.RayClusterGVK)
	u.SetName(name)
	u.SetLabels(map[string]string{"volcano.sh/queue-name": queue})
	return u
}

func (rayClusters) describe(ctx context.Context, s *scenario, name string) string {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(measure.RayClusterGVK)
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, u); err != nil {
		return err.Error()
	}
	state, _, _ := unstructured.NestedString(u.Object, "status", "state")
	reason, _, _ := unstructured.NestedString(u.Object, "status", "reason")
	return fmt.Sprintf("state %q %s; %s", state, reason, describePodGroup(ctx, s, name))
}

// bareGangs are the suite's own gangs, with no operator (package bare): a
// ConfigMap per gang and what gpulab's operator would create for it, made
// by the floor (bare.Floor), an ideal operator: each gang's children the
// moment its ConfigMap exists, all gangs at once, through an unlimited
// client, and one status write per gang when its pods are all Ready.
type bareGangs struct{}

var _ selfReconciled = bareGangs{}

func (bareGangs) recorded() measure.Workload { return measure.BareGangs{} }

// build is the gang's ConfigMap.
func (bareGangs) build(name string, groups []workerGroup) client.Object {
	spec := bare.Spec{Queue: fp.queue, Head: podTemplate("head", 0)}
	for _, g := range groups {
		spec.Groups = append(spec.Groups, bare.Group{Name: g.name, Replicas: g.n, Template: podTemplate("worker", g.gpus)})
	}
	return bare.Object(name, runLabels(), spec)
}

var (
	bareClientOnce sync.Once
	bareClient     client.Client
	bareClientErr  error
)

// reconcile starts the scenario's floor, before any of its gangs exists,
// as a running operator is: its watch of the namespace's pods, and on the
// first scenario the client it shares with the later ones.
func (bareGangs) reconcile(ctx context.Context, s *scenario) error {
	bareClientOnce.Do(func() {
		bareClient, bareClientErr = bare.Client(bare.ClientInput{Config: cluster.Config, Scheme: local.Scheme, Unlimited: true})
	})
	if bareClientErr != nil {
		return bareClientErr
	}
	f, err := bare.StartFloor(ctx, bare.FloorInput{Config: cluster.Config, Scheme: local.Scheme, Namespace: s.ns, Client: bareClient})
	if err != nil {
		return err
	}
	s.floor = f
	return nil
}

func (bareGangs) created(ctx context.Context, s *scenario, obj client.Object) error {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return fmt.Errorf("a bare gang is a ConfigMap, not %T", obj)
	}
	return s.floor.Created(ctx, cm)
}

func (bareGangs) describe(ctx context.Context, s *scenario, name string) string {
	tl := s.recorder.Timelines()[name]
	ready, desired, written := s.floor.Progress(name)
	floor := fmt.Sprintf("the floor saw %d of %d pods Ready, status written %v", ready, desired, written)
	if err := s.floor.Err(); err != nil {
		floor += fmt.Sprintf(" (%v)", err)
	}
	return fmt.Sprintf("%d of %d pods created, %d bound; %s; %s", tl.Pods, tl.Desired, s.recorder.Bound(name), floor, describePodGroup(ctx, s, name))
}

// nativeGangs says the run's gangs are kube-scheduler's own
// (--scheduler=kubernetes).
func nativeGangs() bool { return opts.Scheduler == "kubernetes" }

// draMode says the gangs claim their GPUs through DRA (--gpu-allocation).
func draMode() bool { return opts.GPUAllocation == "dra" }

// nativePodGroupOf is the gang's scheduling.k8s.io PodGroup: the one
// whose controller is the gang's object.
func nativePodGroupOf(ctx context.Context, s *scenario, gang string) (*k8sschedulingv1beta1.PodGroup, error) {
	var pgs k8sschedulingv1beta1.PodGroupList
	if err := s.c.List(ctx, &pgs, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	if pg := controlledByGang(pgs.Items, gang); pg != nil {
		return pg, nil
	}
	return nil, apierrors.NewNotFound(k8sschedulingv1beta1.Resource("podgroups"), gang)
}

// podGroupOf is the PodGroup Volcano gang-schedules the gang with: the
// one whose controller is the gang's object.
func podGroupOf(ctx context.Context, s *scenario, gang string) (*schedulingv1beta1.PodGroup, error) {
	var pgs schedulingv1beta1.PodGroupList
	if err := s.c.List(ctx, &pgs, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	if pg := controlledByGang(pgs.Items, gang); pg != nil {
		return pg, nil
	}
	return nil, apierrors.NewNotFound(schedulingv1beta1.Resource("podgroups"), gang)
}

// controlledByGang is the item whose controller is the gang's object, or
// nil: a PodGroup of either scheduler's API.
func controlledByGang[T any, P interface {
	*T
	metav1.Object
}](items []T, gang string) P {
	kind := workload().recorded().Kind()
	for i := range items {
		if ref := metav1.GetControllerOf(P(&items[i])); ref != nil && ref.Kind == kind && ref.Name == gang {
			return P(&items[i])
		}
	}
	return nil
}
