package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/testbeds/local"
)

// scenario is one feature's namespace with a recorder watching it.
type scenario struct {
	t        *testing.T
	feature  string
	ns       string
	c        client.Client
	recorder *measure.Recorder
	checked  bool
}

var nsSeq int

// newScenario creates a fresh namespace and starts watching it.
func newScenario(ctx context.Context, t *testing.T, feature string) *scenario {
	t.Helper()
	nsSeq++
	ns := fmt.Sprintf("gpulab-conformance-%s-%d-%d", feature, time.Now().Unix()%100000, nsSeq)
	c := cluster.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		fatalf(t, "creating namespace: %v", err)
	}
	rec, err := measure.Start(ctx, measure.RecorderInput{Config: cluster.Config, Scheme: local.Scheme, Namespace: ns})
	if err != nil {
		fatalf(t, "starting watches: %v", err)
	}
	s := &scenario{t: t, feature: feature, ns: ns, c: c, recorder: rec}
	t.Cleanup(s.cleanup)
	return s
}

// cleanup checks the invariants if the assessment stopped before it did
// (a failed wait still leaves evidence worth reporting), then deletes the
// namespace and waits until its pods are gone, so the next scenario finds
// the capacity free.
func (s *scenario) cleanup() {
	if !s.checked {
		s.checkInvariants()
	}
	s.recorder.Stop()
	ctx := context.Background()
	_ = s.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}})
	_ = waitFor(ctx, 2*time.Minute, func() (bool, string) {
		var pods corev1.PodList
		if err := s.c.List(ctx, &pods, client.InNamespace(s.ns)); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left in %s", len(pods.Items), s.ns)
	})
}

// gpuCluster is a head (no GPUs) and one worker group of n pods × gpus.
func gpuCluster(ns, name string, n, gpus int32) *gpulabv1alpha1.GPUCluster {
	tmpl := func(c string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: c, Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		}}}}
	}
	gc := &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Head:         gpulabv1alpha1.HeadSpec{Template: tmpl("head")},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "workers", Replicas: n, Template: tmpl("worker")}},
		},
	}
	if gpus > 0 {
		gc.Spec.WorkerGroups[0].GPUs = &gpulabv1alpha1.GPURequest{PerPod: &gpus}
	}
	return gc
}

// create creates a cluster and tells the recorder when and how big.
func (s *scenario) create(ctx context.Context, gc *gpulabv1alpha1.GPUCluster) {
	s.t.Helper()
	desired := 1
	for _, g := range gc.Spec.WorkerGroups {
		desired += int(g.Replicas)
	}
	s.recorder.Expect(gc.Name, desired, time.Now())
	if err := s.c.Create(ctx, gc); err != nil {
		fatalf(s.t, "creating GPUCluster %s: %v", gc.Name, err)
	}
}

func (s *scenario) get(ctx context.Context, name string) *gpulabv1alpha1.GPUCluster {
	gc := &gpulabv1alpha1.GPUCluster{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, gc); err != nil {
		return &gpulabv1alpha1.GPUCluster{}
	}
	return gc
}

// waitReady waits for status Ready, failing the feature with the last
// status seen.
func (s *scenario) waitReady(ctx context.Context, name string, timeout time.Duration) {
	s.t.Helper()
	err := waitFor(ctx, timeout, func() (bool, string) {
		gc := s.get(ctx, name)
		return gc.Status.Phase == gpulabv1alpha1.ClusterReady, describe(gc)
	})
	if err != nil {
		fatalf(s.t, "GPUCluster %s not Ready: %v", name, err)
	}
}

func (s *scenario) delete(ctx context.Context, name string) {
	s.t.Helper()
	err := s.c.Delete(ctx, &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}})
	if err != nil && !apierrors.IsNotFound(err) {
		fatalf(s.t, "deleting %s: %v", name, err)
	}
}

// checkInvariants fails the feature for every broken invariant the
// recorder saw: duplicate pods, gangs seen partly bound, pods created while
// their PodGroup did not exist, a status that claimed Ready early. It first
// lets pending verdicts (a partial binding within its grace, a lagging
// watch) settle, so none is dropped for being early.
func (s *scenario) checkInvariants() {
	s.t.Helper()
	s.checked = true
	if err := s.recorder.Settle(context.Background(), 2*measure.DefaultPartialGrace+time.Second); err != nil {
		failf(s.t, "the recorder could not decide every invariant: %v", err)
	}
	for _, v := range s.recorder.Violations() {
		failf(s.t, "%s", v.What)
	}
}

func describe(gc *gpulabv1alpha1.GPUCluster) string {
	var conds []string
	for _, c := range gc.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return fmt.Sprintf("phase %q, ready %d/%d; %s", gc.Status.Phase, gc.Status.ReadyPods, gc.Status.DesiredPods, strings.Join(conds, "; "))
}

func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	return poll.Until(ctx, timeout, cond)
}

// freeCapacity is the GPUs on schedulable nodes not requested by bound,
// running pods: free GPUs in total and whole free 8-GPU nodes.
func freeCapacity(ctx context.Context, c client.Client) (free, wholeNodes int, err error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return 0, 0, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return 0, 0, err
	}
	used := map[string]int64{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ctr := range p.Spec.Containers {
			q := ctr.Resources.Requests["nvidia.com/gpu"]
			used[p.Spec.NodeName] += q.Value()
		}
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			continue
		}
		alloc := n.Status.Allocatable["nvidia.com/gpu"]
		left := alloc.Value() - used[n.Name]
		free += int(left)
		if alloc.Value() == 8 && left == 8 {
			wholeNodes++
		}
	}
	return free, wholeNodes, nil
}

// createPod creates a pod the assessment owns in the scenario's namespace,
// labelled as the run's, so the run's cleanup finds it too.
func (s *scenario) createPod(ctx context.Context, pod *corev1.Pod) error {
	pod.Namespace = s.ns
	return s.c.Create(ctx, pod)
}

// gpuNodes are the nodes the run may use that advertise nvidia.com/gpu,
// sorted by name.
func gpuNodes(ctx context.Context, c client.Client) ([]corev1.Node, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var out []corev1.Node
	for _, n := range nodes.Items {
		if gpus := n.Status.Allocatable[gfd.GPUResource]; gpus.Value() > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}
