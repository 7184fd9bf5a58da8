package gpucluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/capacity"
)

// fleetView memoizes the capacity view every reconcile reads. Rebuilding
// it each time listed and walked every node and inventory: at 1,000 gangs
// on 1,250 nodes that was a quarter of the operator's CPU, and it grew with
// nodes times reconciles. The informers' handlers mark the view dirty on
// the changes that can move it (not on heartbeats), and it is rebuilt when
// the first fresh inventory would go stale.
type fleetView struct {
	dirty atomic.Bool

	mu sync.Mutex
	// builds counts rebuilds (tests).
	builds int
	valid  bool
	until  time.Time
	view   []capacity.Node
	// fromInventory and stale are capacity.Nodes's other results.
	fromInventory bool
	stale         []string
}

// track marks the view dirty on node and inventory changes that matter.
// Call it before the cache starts.
func (f *fleetView) track(ctx context.Context, informers cache.Informers) error {
	mark := func(any) { f.dirty.Store(true) }
	watch := func(obj client.Object, changed func(was, now any) bool) error {
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T for the capacity view: %w", obj, err)
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    mark,
			DeleteFunc: mark,
			UpdateFunc: func(was, now any) {
				if changed(was, now) {
					f.dirty.Store(true)
				}
			},
		})
		return err
	}
	if err := watch(&corev1.Node{}, func(was, now any) bool {
		a, ok1 := was.(*corev1.Node)
		b, ok2 := now.(*corev1.Node)
		return !ok1 || !ok2 || capacity.NodeChanged(a, b)
	}); err != nil {
		return err
	}
	return watch(&gpulabv1alpha1.GPUInventory{}, func(was, now any) bool {
		a, ok1 := was.(*gpulabv1alpha1.GPUInventory)
		b, ok2 := now.(*gpulabv1alpha1.GPUInventory)
		return !ok1 || !ok2 || capacity.InventoryChanged(a, b, time.Now())
	})
}

// get returns the view at now, rebuilt from c when it may have moved. The
// slices are shared: callers only read them.
func (f *fleetView) get(ctx context.Context, c client.Reader, now time.Time) ([]capacity.Node, bool, []string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.valid && !f.dirty.Load() && now.Before(f.until) {
		return f.view, f.fromInventory, f.stale, nil
	}
	// Cleared before listing: a change the lists miss marks it again (the
	// informer updates its store before it calls the handlers).
	f.dirty.Store(false)
	f.valid = false
	// Only read, so the lists share the cache's objects.
	var invs gpulabv1alpha1.GPUInventoryList
	if err := c.List(ctx, &invs, client.UnsafeDisableDeepCopy); err != nil && !meta.IsNoMatchError(err) {
		return nil, false, nil, fmt.Errorf("listing GPU inventories: %w", err)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, nil, fmt.Errorf("listing nodes: %w", err)
	}
	f.view, f.fromInventory, f.stale = capacity.Nodes(invs.Items, nodes.Items, now)
	f.until = now.Add(maxFleetAge)
	for i := range invs.Items {
		if at, ok := capacity.StaleAt(&invs.Items[i]); ok && at.After(now) && at.Before(f.until) {
			f.until = at
		}
	}
	f.valid = true
	f.builds++
	return f.view, f.fromInventory, f.stale, nil
}

// maxFleetAge bounds how long a view is kept with no change reported: a
// change the handlers should have seen and did not costs at most this.
const maxFleetAge = time.Minute
