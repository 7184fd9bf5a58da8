package gpucluster

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/capacity"
)

// An agent renews its node's heartbeat Lease every minute and writes the
// GPUInventory only when it changes. Either event wakes a node's clusters
// only when it can change capacity: a renewal of a fresh heartbeat does
// not; one that makes a stale inventory trusted again does, and so does a
// Lease deleted while the inventory's own heartbeat is past.

// inventoryChanged passes inventory updates that can change capacity, the
// node's Lease read from the cache.
func (r *Reconciler) inventoryChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		was, ok1 := e.ObjectOld.(*gpulabv1alpha1.GPUInventory)
		now, ok2 := e.ObjectNew.(*gpulabv1alpha1.GPUInventory)
		if !ok1 || !ok2 {
			return true
		}
		lease, ok := r.heartbeatLease(now.Name)
		if !ok {
			return true
		}
		at := time.Now()
		was, _ = r.fleet.onOperatorClock(was, nil, at)
		now, lease = r.fleet.onOperatorClock(now, lease, at)
		return capacity.InventoryChanged(was, now, lease, at)
	}}
}

// leaseChanged passes heartbeat Lease events that can change capacity, the
// node's inventory read from the cache. A Lease without an inventory
// changes nothing.
func (r *Reconciler) leaseChanged() predicate.Funcs {
	changed := func(name string, was, now *coordinationv1.Lease) bool {
		inv := &gpulabv1alpha1.GPUInventory{}
		if err := r.client.Get(context.Background(), client.ObjectKey{Name: name}, inv); err != nil {
			return !apierrors.IsNotFound(err)
		}
		at := time.Now()
		_, was = r.fleet.onOperatorClock(nil, was, at)
		inv, now = r.fleet.onOperatorClock(inv, now, at)
		return capacity.LeaseChanged(inv, was, now, at)
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			l, ok := e.Object.(*coordinationv1.Lease)
			return !ok || changed(l.Name, nil, l)
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			was, ok1 := e.ObjectOld.(*coordinationv1.Lease)
			now, ok2 := e.ObjectNew.(*coordinationv1.Lease)
			return !ok1 || !ok2 || changed(now.Name, was, now)
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			l, ok := e.Object.(*coordinationv1.Lease)
			return !ok || changed(l.Name, l, nil)
		},
	}
}

// heartbeatLease is node's heartbeat Lease from the cache, nil when it has
// none; ok is false when the cache could not say.
func (r *Reconciler) heartbeatLease(node string) (lease *coordinationv1.Lease, ok bool) {
	l := &coordinationv1.Lease{}
	err := r.client.Get(context.Background(), client.ObjectKey{Namespace: r.opts.AgentLeaseNamespace, Name: node}, l)
	switch {
	case apierrors.IsNotFound(err):
		return nil, true
	case err != nil:
		return nil, false
	}
	return l, true
}

// clustersForLease wakes the clusters of the Lease's node's inventory.
func (r *Reconciler) clustersForLease(ctx context.Context, obj client.Object) []reconcile.Request {
	inv := &gpulabv1alpha1.GPUInventory{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: obj.GetName()}, inv); err != nil {
		if !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "reading the inventory of a heartbeat Lease", "lease", client.ObjectKeyFromObject(obj))
		}
		// Without an inventory, the node counts from allocatable; its
		// changes are the node watch's.
		r.fleet.invalidate()
		return nil
	}
	return r.clustersForInventory(ctx, inv)
}
