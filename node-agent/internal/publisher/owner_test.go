package publisher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

// reRegister deletes node and creates it again under the same name, as a
// kubelet re-registering does, and returns the new Node.
func reRegister(t *testing.T, c client.Client, node *corev1.Node) *corev1.Node {
	t.Helper()
	if err := c.Delete(ctx(t), node); err != nil {
		t.Fatal(err)
	}
	fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels}}
	if err := poll.Until(ctx(t), 15*time.Second, func() (bool, string) {
		err := c.Create(ctx(t), fresh)
		return err == nil, fmt.Sprintf("creating node %s again: %v", node.Name, err)
	}); err != nil {
		t.Fatal(err)
	}
	if fresh.UID == node.UID {
		t.Fatalf("node %s re-created with the same UID %s", node.Name, node.UID)
	}
	return fresh
}

// collectGarbage deletes what names a dead owner, as the garbage collector
// does (envtest runs none).
func collectGarbage(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Delete(ctx(t), o); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
}

func ownerUID(o metav1.Object) types.UID {
	if refs := o.GetOwnerReferences(); len(refs) == 1 && refs[0].Kind == "Node" {
		return refs[0].UID
	}
	return ""
}

// TestNodeReRegistered: a Node deleted and registered again under the same
// name has a new UID. The publisher must not go on writing the old UID as
// the owner (the garbage collector deletes whatever names a dead owner):
// it re-reads the Node when a write shows a UID it does not know, and when
// an object it wrote is gone.
func TestNodeReRegistered(t *testing.T) {
	e := needEnv(t)
	ns := createNamespace(t, e.Client, "reregistered-leases")
	st := publisher.State{Status: v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08"}, Labels: map[string]string{"nvidia.com/gpu.count": "8"}}
	inventory := func(node string) (*v1alpha1.GPUInventory, error) {
		inv := &v1alpha1.GPUInventory{}
		return inv, e.Client.Get(ctx(t), client.ObjectKey{Name: node}, inv)
	}
	lease := func(node string) (*coordinationv1.Lease, error) {
		l := &coordinationv1.Lease{}
		return l, e.Client.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: node}, l)
	}
	// start publishes for a new node until its Lease exists too.
	start := func(t *testing.T, name string) (*corev1.Node, *publisher.Publisher) {
		node := createNode(t, e.Client, name, nil)
		p := publisher.New(admin, publisher.Options{HeartbeatPeriod: time.Second, LeaseNamespace: ns, LabelNode: true})
		if err := poll.Until(ctx(t), 15*time.Second, func() (bool, string) {
			err := p.Publish(ctx(t), name, st)
			_, lerr := lease(name)
			return err == nil && lerr == nil, fmt.Sprintf("publish: %v; lease: %v", err, lerr)
		}); err != nil {
			t.Fatal(err)
		}
		return node, p
	}
	// ownedBy waits until p has written the inventory and the Lease with
	// owner uid.
	ownedBy := func(t *testing.T, p *publisher.Publisher, name string, s publisher.State, uid types.UID) {
		t.Helper()
		if err := poll.Until(ctx(t), 15*time.Second, func() (bool, string) {
			err := p.Publish(ctx(t), name, s)
			inv, ierr := inventory(name)
			l, lerr := lease(name)
			if ierr != nil || lerr != nil {
				return false, fmt.Sprintf("publish: %v; inventory: %v; lease: %v", err, ierr, lerr)
			}
			return err == nil && ownerUID(inv) == uid && ownerUID(l) == uid,
				fmt.Sprintf("publish: %v; inventory owned by %q, lease by %q", err, ownerUID(inv), ownerUID(l))
		}); err != nil {
			t.Fatalf("want both owned by the re-registered node %s: %v", uid, err)
		}
	}

	t.Run("a write shows the new UID", func(t *testing.T) {
		node, p := start(t, "reregistered-node-a")
		fresh := reRegister(t, e.Client, node)
		// The label write answers with the Node, whose UID is new.
		changed := publisher.State{Status: st.Status, Labels: map[string]string{"nvidia.com/gpu.count": "7"}}
		ownedBy(t, p, node.Name, changed, fresh.UID)
	})

	t.Run("the objects written are garbage-collected", func(t *testing.T) {
		node, p := start(t, "reregistered-node-b")
		fresh := reRegister(t, e.Client, node)
		inv, _ := inventory(node.Name)
		l, _ := lease(node.Name)
		collectGarbage(t, e.Client, inv, l)
		// The state is unchanged: only the Lease's renewal finds it gone.
		ownedBy(t, p, node.Name, st, fresh.UID)
	})

	t.Run("the watched inventory is deleted", func(t *testing.T) {
		node := createNode(t, e.Client, "reregistered-node-c", nil)
		// No heartbeat: the watch alone says the inventory is gone.
		p := publisher.New(admin, publisher.Options{HeartbeatPeriod: -1})
		if err := p.Publish(ctx(t), node.Name, st); err != nil {
			t.Fatal(err)
		}
		watchCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		seen := make(chan string, 16)
		go func() { done <- p.WatchClearHealth(watchCtx, node.Name, func(v string) { seen <- v }) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		select {
		case <-seen:
		case <-time.After(15 * time.Second):
			t.Fatal("the watch never reported the inventory")
		}
		fresh := reRegister(t, e.Client, node)
		inv, _ := inventory(node.Name)
		collectGarbage(t, e.Client, inv)
		if err := poll.Until(ctx(t), 15*time.Second, func() (bool, string) {
			err := p.Publish(ctx(t), node.Name, st)
			inv, ierr := inventory(node.Name)
			if ierr != nil {
				return false, fmt.Sprintf("publish: %v; inventory: %v", err, ierr)
			}
			return err == nil && ownerUID(inv) == fresh.UID, fmt.Sprintf("publish: %v; inventory owned by %q", err, ownerUID(inv))
		}); err != nil {
			t.Fatalf("want the inventory back, owned by the re-registered node %s: %v", fresh.UID, err)
		}
	})
}
