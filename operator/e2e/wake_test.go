package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/operator/internal/manager"
	"github.com/gpulab/gpulab/testbeds/local"
	"github.com/gpulab/gpulab/testbeds/local/localtest"
)

// TestUncordonWakesAnUnschedulableGang: on two H100 nodes with fresh
// inventories, a gang that needs both is Unschedulable while
// one is cordoned, and goes Ready through Volcano after the uncordon with
// nothing else touched. It logs the time from the uncordon to Ready (the
// goal is under 5 s on the local testbed).
func TestUncordonWakesAnUnschedulableGang(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fleet, err := local.ParseFleet("dgx-h100=2")
	if err != nil {
		t.Fatal(err)
	}
	tb := localtest.Start(t, local.Options{Name: "gpulab-operator-wake", Fleet: fleet})
	c := startOperator(t, tb, manager.Options{}, nil)

	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingLabels{gfd.Product: h100}); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("%d H100 nodes, want 2", len(nodes.Items))
	}
	// The testbed's agents publish each node's inventory: capacity comes
	// from them, so no allocatable timer re-checks the cluster.
	for _, n := range nodes.Items {
		inv := &gpulabv1alpha1.GPUInventory{}
		poll(t, "the inventory of "+n.Name, func() (bool, string) {
			err := c.Get(ctx, client.ObjectKey{Name: n.Name}, inv)
			return err == nil && inv.Status.Summary.Healthy == 8, fmt.Sprintf("%v, %+v", err, inv.Status.Summary)
		})
	}
	cordoned := nodes.Items[1].Name
	setUnschedulable := func(v bool) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n := &corev1.Node{}
			if err := c.Get(ctx, client.ObjectKey{Name: cordoned}, n); err != nil {
				return err
			}
			n.Spec.Unschedulable = v
			return c.Update(ctx, n)
		}); err != nil {
			t.Fatal(err)
		}
	}
	setUnschedulable(true)
	ns := namespace(t, c, "wake")
	if err := c.Create(ctx, cluster(ns, "both", 2, h100)); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, c, ns, "both", gpulabv1alpha1.ClusterUnschedulable)
	// Settled: the reconciles the cluster's own writes caused are over.
	var rv string
	settled := time.Time{}
	poll(t, "the cluster settled", func() (bool, string) {
		if got := getCluster(t, c, ns, "both"); got.ResourceVersion != rv {
			rv, settled = got.ResourceVersion, time.Now()
		}
		return time.Since(settled) > 3*time.Second, "status still changing"
	})
	uncordoned := time.Now()
	setUnschedulable(false)
	got := waitPhase(t, c, ns, "both", gpulabv1alpha1.ClusterReady)
	t.Logf("uncordon to Ready: %s (Ready at %s, %d ready pods)", time.Since(uncordoned).Round(10*time.Millisecond), got.Status.ReadyTime, got.Status.ReadyPods)
	if got.Status.ReadyPods != 3 {
		t.Errorf("%d ready pods, want 3", got.Status.ReadyPods)
	}
}
