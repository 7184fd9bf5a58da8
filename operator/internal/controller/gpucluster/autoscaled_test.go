package gpucluster_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/operator/internal/testutil"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// autoscaledEnv is an API server that also serves Karpenter's NodePools,
// with two 8-GPU nodes: a gang of four 8-GPU workers and a head is larger
// than today's nodes.
func autoscaledEnv(t *testing.T) client.Client {
	t.Helper()
	needEnv(t)
	e := envtest.StartForTest(t, envtest.Options{ExtraCRDDirs: []string{filepath.Join("testdata", "karpenter")}})
	if err := testutil.CreateGPUNodes(t.Context(), e.Client, 2); err != nil {
		t.Fatal(err)
	}
	testutil.StartManager(t, e.Config, testutil.ManagerOptions{})
	return e.Client
}

// nodePool creates a NodePool whose limits allow gpus GPUs.
func nodePool(t *testing.T, c client.Client, name string, gpus int) {
	t.Helper()
	np := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"limits":   map[string]any{"nvidia.com/gpu": fmt.Sprint(gpus)},
		"template": map[string]any{"spec": map[string]any{"nodeClassRef": map[string]any{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
	}}}
	np.SetGroupVersionKind(karpenter.NodePoolKind)
	np.SetName(name)
	if err := c.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
}

func bigGang(t *testing.T, c client.Client, ns, name string, mode gpulabv1alpha1.CapacityMode) {
	t.Helper()
	gc := testutil.NewCluster(ns, name, 4, 8)
	gc.Spec.Scheduling.Capacity = mode
	if err := c.Create(t.Context(), gc); err != nil {
		t.Fatal(err)
	}
}

// waitSchedulable waits for phase and a Schedulable condition with reason
// whose message says says.
func waitSchedulable(t *testing.T, c client.Client, ns, name string, phase gpulabv1alpha1.ClusterPhase, reason, says string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, string(phase), func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, name)
		cond := meta.FindStatusCondition(got.Status.Conditions, gpulabv1alpha1.ConditionSchedulable)
		if cond == nil {
			return false, fmt.Sprintf("phase %q, no Schedulable condition", got.Status.Phase)
		}
		return got.Status.Phase == phase && cond.Reason == reason && strings.Contains(cond.Message, says),
			fmt.Sprintf("phase %q, Schedulable %s %s: %s", got.Status.Phase, cond.Status, cond.Reason, cond.Message)
	})
}

func eventOf(t *testing.T, c client.Client, ns, reason string) *eventsv1.Event {
	t.Helper()
	var events eventsv1.EventList
	if err := c.List(t.Context(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range events.Items {
		if events.Items[i].Reason == reason {
			return &events.Items[i]
		}
	}
	return nil
}

// TestAGangWaitsForNodesANodePoolCanAdd: a gang larger than today's nodes
// on a cluster whose NodePool has room for what it lacks gets its PodGroup
// and pods, so that the autoscaler sees them, and says it waits for nodes
// (a Normal event, not a Warning). Before, it created nothing and stayed
// Unschedulable: no autoscaler ever saw its pods.
func TestAGangWaitsForNodesANodePoolCanAdd(t *testing.T) {
	c := autoscaledEnv(t)
	nodePool(t, c, "gpu", 32)
	ns := testutil.NewNamespace(t, c)
	bigGang(t, c, ns, "big", "")
	waitSchedulable(t, c, ns, "big", gpulabv1alpha1.ClusterWaitingForNodes, gpulabv1alpha1.ReasonWaitingForNodes, "NodePool gpu")
	testutil.Eventually(t, waitTimeout, "5 pods", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 5, fmt.Sprintf("%d pods", n)
	})
	testutil.Eventually(t, waitTimeout, "a WaitingForNodes event", func() (bool, string) {
		e := eventOf(t, c, ns, gpulabv1alpha1.ReasonWaitingForNodes)
		return e != nil && e.Type == corev1.EventTypeNormal, fmt.Sprintf("event %+v", e)
	})
}

// TestAGangNoNodePoolCanHostIsUnschedulable: when the NodePools' limits
// cannot cover what the gang lacks, it is Unschedulable, with a Warning
// naming them, and creates no pod.
func TestAGangNoNodePoolCanHostIsUnschedulable(t *testing.T) {
	c := autoscaledEnv(t)
	nodePool(t, c, "small", 8)
	ns := testutil.NewNamespace(t, c)
	bigGang(t, c, ns, "big", "")
	waitSchedulable(t, c, ns, "big", gpulabv1alpha1.ClusterUnschedulable, gpulabv1alpha1.ReasonNoNodePoolFits, "NodePool small can add at most 8")
	testutil.Eventually(t, waitTimeout, "a NoNodePoolFits Warning", func() (bool, string) {
		e := eventOf(t, c, ns, gpulabv1alpha1.ReasonNoNodePoolFits)
		return e != nil && e.Type == corev1.EventTypeWarning, fmt.Sprintf("event %+v", e)
	})
	if n := len(testutil.ListPods(t, c, ns)); n != 0 {
		t.Errorf("%d pods for a gang no NodePool can host", n)
	}

	// Fixed counts today's nodes only, even with a NodePool that has room.
	nodePool(t, c, "large", 64)
	bigGang(t, c, ns, "fixed", gpulabv1alpha1.CapacityFixed)
	waitSchedulable(t, c, ns, "fixed", gpulabv1alpha1.ClusterUnschedulable, gpulabv1alpha1.ReasonInsufficientGPUs, "")
	// The NodePool's arrival woke the first gang: it now waits for nodes.
	waitSchedulable(t, c, ns, "big", gpulabv1alpha1.ClusterWaitingForNodes, gpulabv1alpha1.ReasonWaitingForNodes, "NodePool large")
}

// TestAutoscaledWaitsWithoutANodePool: spec.scheduling.capacity
// Autoscaled is for an autoscaler the operator cannot see
// (cluster-autoscaler): with no NodePool API served, the gang is still
// built and waits for nodes.
func TestAutoscaledWaitsWithoutANodePool(t *testing.T) {
	c := needEnv(t)
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	ns := testutil.NewNamespace(t, c)
	gc := testutil.NewCluster(ns, "grows", 5, 8)
	gc.Spec.Scheduling.Capacity = gpulabv1alpha1.CapacityAutoscaled
	if err := c.Create(t.Context(), gc); err != nil {
		t.Fatal(err)
	}
	waitSchedulable(t, c, ns, "grows", gpulabv1alpha1.ClusterWaitingForNodes, gpulabv1alpha1.ReasonWaitingForNodes, "Autoscaled")
	testutil.Eventually(t, waitTimeout, "6 pods", func() (bool, string) {
		n := len(testutil.ListPods(t, c, ns))
		return n == 6, fmt.Sprintf("%d pods", n)
	})
}
