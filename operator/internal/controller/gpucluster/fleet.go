package gpucluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/draclass"
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
	// dra says resource.k8s.io/v1 is served: the view also counts each
	// DeviceClass's devices per node from the ResourceSlices. Evaluating
	// the classes' CEL over every device costs about 0.15 s at 10,000
	// devices (BenchmarkPools), so the counts are kept until a slice or
	// class changes (draChanged), not redone on every rebuild.
	dra        bool
	draChanged atomic.Bool
	devices    map[string]map[string]int32
	draCounted bool

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
	// clock translates the agents' heartbeat times to this operator's.
	clock heartbeatClock
}

// heartbeatClock maps each heartbeat timestamp an agent wrote (on its own
// clock) to when this operator saw that value change (on its own), so
// staleness is judged as the node lifecycle controller judges kubelet
// heartbeats, and an agent's clock skew neither hides a dead agent nor
// condemns a live one for longer than one heartbeat. A value seen first
// (at start, or a new node) counts from its own time, but never from later
// than now: an inventory an hour old stays stale across an operator
// restart, and a clock ahead earns no extra grace.
type heartbeatClock struct {
	seen map[string]heartbeatSeen
}

type heartbeatSeen struct{ value, at time.Time }

// local is t on the operator's clock: when key's heartbeat changed to this
// value. Callers hold fleetView.mu.
func (c *heartbeatClock) local(key string, t *metav1.Time, now time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	if c.seen == nil {
		c.seen = map[string]heartbeatSeen{}
	}
	o, ok := c.seen[key]
	switch {
	case !ok:
		o = heartbeatSeen{value: t.Time, at: t.Time}
		if t.After(now) {
			o.at = now
		}
		c.seen[key] = o
	case !o.value.Equal(t.Time):
		o = heartbeatSeen{value: t.Time, at: now}
		c.seen[key] = o
	}
	return &metav1.Time{Time: o.at}
}

// onInventory puts inv's own heartbeat (inv is a copy: the pointer is
// replaced, never written through) on the operator's clock and returns its
// key. Callers hold fleetView.mu.
func (c *heartbeatClock) onInventory(inv *gpulabv1alpha1.GPUInventory, now time.Time) string {
	key := "inventory/" + inv.Name
	inv.Status.HeartbeatTime = c.local(key, inv.Status.HeartbeatTime, now)
	return key
}

// onLease is onInventory for a heartbeat Lease's renew time.
func (c *heartbeatClock) onLease(l *coordinationv1.Lease, now time.Time) string {
	key := "lease/" + l.Name
	if l.Spec.RenewTime != nil {
		l.Spec.RenewTime = (*metav1.MicroTime)(c.local(key, (*metav1.Time)(l.Spec.RenewTime), now))
	}
	return key
}

// onOperatorClock returns shallow copies of inv and lease (either may be
// nil) with their heartbeats on the operator's clock, seen at now, for the
// watches' predicates to judge as the view does.
func (f *fleetView) onOperatorClock(inv *gpulabv1alpha1.GPUInventory, lease *coordinationv1.Lease, now time.Time) (*gpulabv1alpha1.GPUInventory, *coordinationv1.Lease) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if inv != nil {
		c := *inv
		f.clock.onInventory(&c, now)
		inv = &c
	}
	if lease != nil {
		c := *lease
		f.clock.onLease(&c, now)
		lease = &c
	}
	return inv, lease
}

// forget drops the heartbeats of objects no longer listed.
func (c *heartbeatClock) forget(keep map[string]bool) {
	for key := range c.seen {
		if !keep[key] {
			delete(c.seen, key)
		}
	}
}

// invalidateDRA makes the next read count the DRA devices again, and
// rebuild the view.
func (f *fleetView) invalidateDRA() {
	f.draChanged.Store(true)
	f.invalidate()
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
	// The lists' items are copies, sharing only what they point to: the
	// heartbeat pointers are replaced, never written through.
	listed := make(map[string]bool, len(invs.Items)+len(leaseList.Items))
	for i := range invs.Items {
		listed[f.clock.onInventory(&invs.Items[i], now)] = true
	}
	leases := make(capacity.Leases, len(leaseList.Items))
	for i := range leaseList.Items {
		listed[f.clock.onLease(&leaseList.Items[i], now)] = true
		leases[leaseList.Items[i].Name] = &leaseList.Items[i]
	}
	f.clock.forget(listed)
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, nil, fmt.Errorf("listing nodes: %w", err)
	}
	if f.dra && (!f.draCounted || f.draChanged.Swap(false)) {
		devices, err := f.classDevices(ctx, c)
		if err != nil {
			f.draChanged.Store(true)
			return nil, false, nil, err
		}
		f.devices, f.draCounted = devices, true
	}
	f.view, f.fromInventory, f.stale = capacity.Nodes(invs.Items, leases, nodes.Items, f.devices, now)
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

// classDevices counts, by node and DeviceClass, the devices each class
// selects in the ResourceSlices. A class whose selectors
// do not compile or fail on a device offers none: the allocator would not
// allocate from it either.
func (f *fleetView) classDevices(ctx context.Context, c client.Reader) (map[string]map[string]int32, error) {
	var classes resourceapi.DeviceClassList
	if err := c.List(ctx, &classes); err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	var slices resourceapi.ResourceSliceList
	if err := c.List(ctx, &slices); err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	out := map[string]map[string]int32{}
	for i := range classes.Items {
		class, err := draclass.Compile(&classes.Items[i])
		if err != nil {
			log.FromContext(ctx).Info("a DeviceClass offers no capacity", "reason", err.Error())
			continue
		}
		pools, err := class.Pools(ctx, slices.Items)
		if err != nil {
			log.FromContext(ctx).Info("a DeviceClass offers no capacity", "reason", err.Error())
			continue
		}
		for node, n := range draclass.PerNode(pools) {
			if out[node] == nil {
				out[node] = map[string]int32{}
			}
			out[node][classes.Items[i].Name] = n
		}
	}
	return out, nil
}
