package gpucluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// setInventory publishes a GPUInventory for a test node, as its agent would.
func setInventory(t *testing.T, c client.Client, node, product string, healthy int32) {
	t.Helper()
	ctx := context.Background()
	inv := &gpulabv1alpha1.GPUInventory{}
	err := c.Get(ctx, client.ObjectKey{Name: node}, inv)
	inv.Name = node
	inv.Status.Summary = gpulabv1alpha1.InventorySummary{Count: 8, Healthy: healthy, Product: product, MemoryMiB: 81559}
	if err != nil {
		if err := c.Create(ctx, inv); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), inv) })
		return
	}
	if err := c.Update(ctx, inv); err != nil {
		t.Fatal(err)
	}
}

// createExactFit creates "exact", 4 workers of 8 H100s: the whole 4-node
// fleet.
func createExactFit(t *testing.T, c client.Client, ns string) {
	t.Helper()
	exact := testutil.NewCluster(ns, "exact", 4, 8)
	exact.Spec.WorkerGroups[0].GPUs.Product = h100
	if err := c.Create(context.Background(), exact); err != nil {
		t.Fatal(err)
	}
}

func schedulable(t *testing.T, c client.Client, ns, name string) *metav1.Condition {
	t.Helper()
	return meta.FindStatusCondition(testutil.GetCluster(t, c, ns, name).Status.Conditions, gpulabv1alpha1.ConditionSchedulable)
}

// TestInventoryDrivesCapacity: capacity comes from GPUInventory's healthy
// GPUs; one sick GPU flips an exactly-fitting cluster to Unschedulable with
// the numbers in its message, and wholeNode resolves from the inventory.
func TestInventoryDrivesCapacity(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	for i := range 4 {
		setInventory(t, c, fmt.Sprintf("h100-%d", i), h100, 8)
	}
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})

	createExactFit(t, c, ns)
	testutil.Eventually(t, waitTimeout, "exact fit schedulable with pods", func() (bool, string) {
		cond := schedulable(t, c, ns, "exact")
		n := len(testutil.ListPods(t, c, ns))
		return cond != nil && cond.Status == metav1.ConditionTrue && n == 5, fmt.Sprintf("%+v, %d pods", cond, n)
	})
	for _, p := range testutil.ListPods(t, c, ns) {
		if p.Labels[gpulabv1alpha1.GroupLabel] != "workers" {
			continue
		}
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Values[0] != h100 {
			t.Errorf("pod %s lacks node affinity on the product: %+v", p.Name, terms)
		}
	}

	setInventory(t, c, "h100-3", h100, 7)
	testutil.Eventually(t, waitTimeout, "Unschedulable after a GPU fails", func() (bool, string) {
		cond := schedulable(t, c, ns, "exact")
		phase := testutil.GetCluster(t, c, ns, "exact").Status.Phase
		return cond != nil && cond.Status == metav1.ConditionFalse && phase == gpulabv1alpha1.ClusterUnschedulable, fmt.Sprintf("%+v, phase %s", cond, phase)
	})
	want := "group workers needs 4 nodes with ≥8 healthy NVIDIA-H100-80GB-HBM3 GPUs; 3 exist"
	if cond := schedulable(t, c, ns, "exact"); cond.Reason != gpulabv1alpha1.ReasonInsufficientGPUs || !strings.Contains(cond.Message, want) {
		t.Errorf("condition %s: %q, want InsufficientGPUs: %q", cond.Reason, cond.Message, want)
	}

	// A new cluster that cannot fit gets no pods at all.
	ns2 := testutil.NewNamespace(t, c)
	if err := c.Create(ctx, testutil.NewCluster(ns2, "toobig", 5, 8)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "toobig Unschedulable", func() (bool, string) {
		cond := schedulable(t, c, ns2, "toobig")
		return cond != nil && cond.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", cond)
	})
	if n := len(testutil.ListPods(t, c, ns2)); n != 0 {
		t.Errorf("an unschedulable cluster has %d pods, want 0", n)
	}

	// wholeNode resolves to the healthy count of the matching nodes.
	setInventory(t, c, "h100-3", h100, 8)
	ns3 := testutil.NewNamespace(t, c)
	whole := testutil.NewCluster(ns3, "whole", 1, 1)
	whole.Spec.WorkerGroups[0].GPUs = &gpulabv1alpha1.GPURequest{WholeNode: true, Product: h100}
	if err := c.Create(ctx, whole); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "wholeNode resolved", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns3, "whole")
		for _, g := range got.Status.Groups {
			if g.Name == "workers" {
				return g.GPUsPerPod == 8 && got.Status.GPUs == 8, fmt.Sprintf("gpusPerPod %d", g.GPUsPerPod)
			}
		}
		return false, "no workers group in status"
	})
	testutil.Eventually(t, waitTimeout, "the worker pod requests 8 GPUs", func() (bool, string) {
		for _, p := range testutil.ListPods(t, c, ns3) {
			if p.Name == "whole-workers-0" {
				q := p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
				return q.Value() == 8, q.String()
			}
		}
		return false, "no worker pod"
	})

	// A product no node has is named in the message.
	ns4 := testutil.NewNamespace(t, c)
	b200 := testutil.NewCluster(ns4, "b200", 1, 8)
	b200.Spec.WorkerGroups[0].GPUs.Product = "NVIDIA-B200"
	if err := c.Create(ctx, b200); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "no matching nodes", func() (bool, string) {
		cond := schedulable(t, c, ns4, "b200")
		return cond != nil && cond.Reason == gpulabv1alpha1.ReasonNoMatchingNodes && strings.Contains(cond.Message, "NVIDIA-B200"), fmt.Sprintf("%+v", cond)
	})
}

// setHeartbeat sets an inventory's last heartbeat, as its agent would
// (every minute).
func setHeartbeat(t *testing.T, c client.Client, node string, at time.Time) {
	t.Helper()
	inv := &gpulabv1alpha1.GPUInventory{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: node}, inv); err != nil {
		t.Fatal(err)
	}
	inv.Status.HeartbeatSeconds = 60
	inv.Status.HeartbeatTime = &metav1.Time{Time: at}
	if err := c.Update(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
}

// TestResumedHeartbeatWakesTheCluster: an inventory whose agent stopped is
// not trusted (its node counts from allocatable); the next heartbeat makes
// it the truth again, and that heartbeat alone, with the same summary,
// wakes the clusters it concerns.
func TestResumedHeartbeatWakesTheCluster(t *testing.T) {
	c, ns := withStaleSickNode(t)
	setHeartbeat(t, c, "h100-3", time.Now())
	untilTrustedAgain(t, c, ns)
}

// withStaleSickNode starts the operator on four H100 nodes whose h100-3
// reports a sick GPU in an inventory an hour old, and waits until an
// exact-fit cluster fits, h100-3 counted from allocatable.
func withStaleSickNode(t *testing.T) (client.Client, string) {
	t.Helper()
	c := needEnv(t)
	ns := testutil.NewNamespace(t, c)
	for i := range 3 {
		setInventory(t, c, fmt.Sprintf("h100-%d", i), h100, 8)
	}
	setInventory(t, c, "h100-3", h100, 7)
	setHeartbeat(t, c, "h100-3", time.Now().Add(-time.Hour))
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})

	createExactFit(t, c, ns)
	testutil.Eventually(t, waitTimeout, "fits, h100-3 counted from allocatable", func() (bool, string) {
		cond := schedulable(t, c, ns, "exact")
		return cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", cond)
	})
	return c, ns
}

// untilTrustedAgain waits until h100-3's sick GPU makes the exact fit
// Unschedulable: its inventory is the truth again.
func untilTrustedAgain(t *testing.T, c client.Client, ns string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, "Unschedulable once h100-3's inventory is trusted again", func() (bool, string) {
		cond := schedulable(t, c, ns, "exact")
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == gpulabv1alpha1.ReasonInsufficientGPUs, fmt.Sprintf("%+v", cond)
	})
}

// TestRenewedLeaseWakesTheCluster: an agent that renews its node's
// heartbeat Lease instead of rewriting the inventory keeps that inventory
// trusted; the Lease alone, created or renewed after the inventory's own
// heartbeat went stale, makes it the truth again and wakes the clusters it
// concerns.
func TestRenewedLeaseWakesTheCluster(t *testing.T) {
	c, ns := withStaleSickNode(t)
	leaseNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gpulabv1alpha1.DefaultHeartbeatLeaseNamespace}}
	if err := c.Create(context.Background(), leaseNS); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The agent's first renewal since the inventory's heartbeat went stale.
	seconds := int32(180)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS.Name, Name: "h100-3", Labels: map[string]string{gpulabv1alpha1.HeartbeatLeaseLabel: "true"}},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: time.Now()}, LeaseDurationSeconds: &seconds},
	}
	if err := c.Create(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), lease) })
	untilTrustedAgain(t, c, ns)
}
