package gpucluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
)

// TestFleetViewRebuildsOnlyWhenItMayHaveMoved: the view is built once and
// reused until a change marks it dirty or an inventory's heartbeat comes
// due, and a rebuild sees what changed.
func TestFleetViewRebuildsOnlyWhenItMayHaveMoved(t *testing.T) {
	s := fleetScheme(t)
	now := time.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{gfd.Product: "H100"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{gfd.GPUResource: resource.MustParse("8")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	inv := &gpulabv1alpha1.GPUInventory{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Status: gpulabv1alpha1.GPUInventoryStatus{
			Summary:          gpulabv1alpha1.InventorySummary{Count: 8, Healthy: 8, Product: "H100"},
			HeartbeatSeconds: 10, HeartbeatTime: &metav1.Time{Time: now},
		},
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(node, inv).Build()
	ctx := context.Background()
	f := &fleetView{}
	healthy := func(at time.Time) int32 {
		t.Helper()
		view, _, _, err := f.get(ctx, c, at)
		if err != nil {
			t.Fatal(err)
		}
		if len(view) == 0 {
			return 0
		}
		return view[0].Healthy
	}

	if got := healthy(now); got != 8 || f.builds != 1 {
		t.Fatalf("first read: %d healthy after %d builds, want 8 after 1", got, f.builds)
	}
	inv.Status.Summary.Healthy = 7
	if err := c.Update(ctx, inv); err != nil {
		t.Fatal(err)
	}
	if got := healthy(now.Add(time.Second)); got != 8 || f.builds != 1 {
		t.Fatalf("unmarked change: %d healthy after %d builds, want the memo (8, 1 build)", got, f.builds)
	}
	f.dirty.Store(true)
	if got := healthy(now.Add(2 * time.Second)); got != 7 || f.builds != 2 {
		t.Fatalf("after a change: %d healthy after %d builds, want 7 after 2", got, f.builds)
	}
	// Three missed heartbeats of 10 s: the inventory is no longer trusted
	// and the node counts from allocatable again, with no event at all.
	if got := healthy(now.Add(31 * time.Second)); got != 8 || f.builds != 3 {
		t.Fatalf("past the heartbeat deadline: %d healthy after %d builds, want 8 (allocatable) after 3", got, f.builds)
	}
}

// TestHeartbeatsJudgedOnTheOperatorsClock: a heartbeat counts from when
// the operator saw it change, as the node lifecycle controller judges
// kubelets, not from the agent's own timestamp: an agent clock an hour
// ahead does not hide an agent that stopped, and one an hour behind is
// trusted again from its next heartbeat.
func TestHeartbeatsJudgedOnTheOperatorsClock(t *testing.T) {
	s := fleetScheme(t)
	now := time.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{gfd.Product: "H100"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{gfd.GPUResource: resource.MustParse("8")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	// 7 healthy in a trusted inventory; allocatable's 8 when stale.
	inv := func(beat time.Time) *gpulabv1alpha1.GPUInventory {
		return &gpulabv1alpha1.GPUInventory{
			ObjectMeta: metav1.ObjectMeta{Name: "a"},
			Status: gpulabv1alpha1.GPUInventoryStatus{
				Summary:          gpulabv1alpha1.InventorySummary{Count: 8, Healthy: 7, Product: "H100"},
				HeartbeatSeconds: 10, HeartbeatTime: &metav1.Time{Time: beat},
			},
		}
	}
	look := func(t *testing.T, f *fleetView, c client.Client, at time.Time, wantStale bool) {
		t.Helper()
		f.invalidate()
		view, _, stale, err := f.get(context.Background(), c, at)
		if err != nil {
			t.Fatal(err)
		}
		want := int32(7)
		if wantStale {
			want = 8
		}
		if (len(stale) > 0) != wantStale || len(view) != 1 || view[0].Healthy != want {
			t.Fatalf("at +%s: stale %v, view %+v; want stale %v", at.Sub(now), stale, view, wantStale)
		}
	}
	t.Run("an hour ahead, then silent", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(node.DeepCopy(), inv(now.Add(time.Hour))).Build()
		f := &fleetView{}
		look(t, f, c, now, false)
		look(t, f, c, now.Add(40*time.Second), true)
	})
	t.Run("an hour behind, then beating", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(node.DeepCopy(), inv(now.Add(-time.Hour))).Build()
		f := &fleetView{}
		look(t, f, c, now, true) // first seen an hour old: not trusted yet
		next := &gpulabv1alpha1.GPUInventory{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: "a"}, next); err != nil {
			t.Fatal(err)
		}
		next.Status.HeartbeatTime = &metav1.Time{Time: now.Add(-time.Hour + 10*time.Second)}
		if err := c.Update(context.Background(), next); err != nil {
			t.Fatal(err)
		}
		look(t, f, c, now.Add(10*time.Second), false)
		look(t, f, c, now.Add(35*time.Second), false)
		look(t, f, c, now.Add(45*time.Second), true)
	})
}

// fleetScheme knows nodes, Leases and gpulab's kinds, for fake clients.
func fleetScheme(t *testing.T) *k8sruntime.Scheme {
	t.Helper()
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := gpulabv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
