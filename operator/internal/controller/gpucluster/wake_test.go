package gpucluster_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// setNode changes node name with mutate (spec, then status) and restores
// what it was at cleanup.
func setNode(t *testing.T, c client.Client, name string, mutate func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	was := node.DeepCopy()
	mutate(node)
	if err := c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status = *mutate2Status(node, mutate)
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		now := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, now); err != nil {
			t.Error(err)
			return
		}
		now.Spec.Unschedulable = was.Spec.Unschedulable
		if err := c.Update(ctx, now); err != nil {
			t.Error(err)
		}
		now.Status.Conditions = was.Status.Conditions
		if err := c.Status().Update(ctx, now); err != nil {
			t.Error(err)
		}
	})
}

// mutate2Status applies mutate to a copy and returns its status: Update
// returns the stored object, without the status change mutate made.
func mutate2Status(node *corev1.Node, mutate func(*corev1.Node)) *corev1.NodeStatus {
	cp := node.DeepCopy()
	mutate(cp)
	return &cp.Status
}

// waitQuiet returns once the operator has written nothing for quiet: its
// event-driven reconciles are done and no deferred status write is due.
func waitQuiet(t *testing.T, traffic *testutil.Traffic, quiet time.Duration) {
	t.Helper()
	last, since := traffic.Snapshot(), time.Now()
	testutil.Eventually(t, waitTimeout, "the operator quiet for "+quiet.String(), func() (bool, string) {
		if now := traffic.Snapshot(); !maps.Equal(now, last) {
			last, since = now, time.Now()
		}
		return time.Since(since) >= quiet, fmt.Sprintf("last write %s ago", time.Since(since).Round(time.Millisecond))
	})
}

func setReady(status corev1.ConditionStatus) func(*corev1.Node) {
	return func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = status
			}
		}
	}
}

// TestCapacityReturningWakesUnschedulable: a gang that needs the whole
// fleet is Unschedulable while a node is cordoned (or NotReady); when the
// node comes back, the cluster is re-checked at once, with no inventory
// change and no timer, and goes Schedulable with its pods.
func TestCapacityReturningWakesUnschedulable(t *testing.T) {
	c := needEnv(t)
	for i := range 4 {
		setInventory(t, c, fmt.Sprintf("h100-%d", i), h100, 8)
	}
	for _, tc := range []struct {
		name           string
		away, restored func(*corev1.Node)
	}{
		{"cordon", func(n *corev1.Node) { n.Spec.Unschedulable = true }, func(n *corev1.Node) { n.Spec.Unschedulable = false }},
		{"NotReady", setReady(corev1.ConditionFalse), setReady(corev1.ConditionTrue)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setNode(t, c, "h100-3", tc.away)
			m := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
			ns := testutil.NewNamespace(t, c)
			createExactFit(t, c, ns)
			testutil.Eventually(t, waitTimeout, "Unschedulable with a node away", func() (bool, string) {
				cond := schedulable(t, c, ns, "exact")
				phase := testutil.GetCluster(t, c, ns, "exact").Status.Phase
				return cond != nil && cond.Status == metav1.ConditionFalse && phase == gpulabv1alpha1.ClusterUnschedulable, fmt.Sprintf("%+v, phase %s", cond, phase)
			})
			// Until the reconciles the cluster's own writes caused are
			// over, one of them could see the node back and hide a
			// missing wake.
			waitQuiet(t, m.Traffic, 3*time.Second)
			setNode(t, c, "h100-3", tc.restored)
			testutil.Eventually(t, waitTimeout, "Schedulable with pods once the node is back", func() (bool, string) {
				cond := schedulable(t, c, ns, "exact")
				n := len(testutil.ListPods(t, c, ns))
				return cond != nil && cond.Status == metav1.ConditionTrue && n == 5, fmt.Sprintf("%+v, %d pods", cond, n)
			})
		})
	}
}
