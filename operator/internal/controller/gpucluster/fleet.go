package gpucluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/capacity"
)

// fleetView memoizes the capacity view every reconcile reads. Rebuilding
// it each time listed and walked every node and inventory: at 1,000 gangs
// on 1,250 nodes that was a quarter of the operator's CPU, and it grew with
// nodes times reconciles. It is rebuilt after a change that can move it
// (invalidate: inventory and heartbeat Lease changes, from the watches that
// wake the clusters; node changes, from the node watch), and when the first
// fresh inventory would go stale.
type fleetView struct {
	dirty atomic.Bool
	// leaseNamespace holds the agents' heartbeat Leases.
	leaseNamespace string

	mu sync.Mutex
	// builds counts rebuilds (tests).
	builds int
	// until is when the view must be rebuilt even if nothing changed; zero
	// before the first build and after a failed one.
	until time.Time
	view  []capacity.Node
	// fromInventory and stale are capacity.Nodes's other results.
	fromInventory bool
	stale         []string
}

// invalidate makes the next read rebuild the view. A handler that wakes
// clusters calls it before it enqueues them: handlers run each in their
// own goroutine, so a separate handler could mark the view after the
// reconcile it woke had read it.
func (f *fleetView) invalidate() { f.dirty.Store(true) }

// get returns the view at now, rebuilt from c when it may have moved. The
// slices are shared: callers only read them.
func (f *fleetView) get(ctx context.Context, c client.Reader, now time.Time) ([]capacity.Node, bool, []string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirty.Load() && now.Before(f.until) {
		return f.view, f.fromInventory, f.stale, nil
	}
	// Cleared before listing: a change the lists miss marks it again (an
	// informer updates its store before it calls its handlers).
	f.dirty.Store(false)
	f.until = time.Time{}
	// Only read, so the lists share the cache's objects.
	var invs gpulabv1alpha1.GPUInventoryList
	if err := c.List(ctx, &invs, client.UnsafeDisableDeepCopy); err != nil && !meta.IsNoMatchError(err) {
		return nil, false, nil, fmt.Errorf("listing GPU inventories: %w", err)
	}
	var leaseList coordinationv1.LeaseList
	if err := c.List(ctx, &leaseList, client.UnsafeDisableDeepCopy, client.InNamespace(f.leaseNamespace),
		client.MatchingLabels{gpulabv1alpha1.HeartbeatLeaseLabel: "true"}); err != nil {
		return nil, false, nil, fmt.Errorf("listing the agents' heartbeat Leases: %w", err)
	}
	leases := make(capacity.Leases, len(leaseList.Items))
	for i := range leaseList.Items {
		leases[leaseList.Items[i].Name] = &leaseList.Items[i]
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, nil, fmt.Errorf("listing nodes: %w", err)
	}
	f.view, f.fromInventory, f.stale = capacity.Nodes(invs.Items, leases, nodes.Items, now)
	until := now.Add(maxFleetAge)
	for i := range invs.Items {
		if at, ok := capacity.StaleAt(&invs.Items[i], leases[invs.Items[i].Name]); ok && at.After(now) && at.Before(until) {
			until = at
		}
	}
	f.until = until
	f.builds++
	return f.view, f.fromInventory, f.stale, nil
}

// maxFleetAge bounds how long a view is kept with no change reported: a
// change the handlers should have seen and did not costs at most this.
const maxFleetAge = time.Minute
