package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Watch follows every ResourceClaim in the cluster for a whole run, in
// the order the API server changed them, and records each allocation
// that hands a claim a device another live claim still holds. A
// snapshot (Allocated, Shared) sees only the instant it was taken; the
// watch also sees a device held twice between two snapshots.
type Watch struct {
	mu          sync.Mutex
	holders     map[Device]map[types.UID]types.NamespacedName // device → the live claims allocated it
	held        map[types.UID][]Device                        // claim → its allocated devices
	deleting    map[types.UID]time.Time                       // claim → its deletionTimestamp, once set
	unreserved  map[types.UID]bool                            // allocated claims reserved for no pod
	allocations int
	shared      []string
	cancel      context.CancelFunc
}

// Mark is where a Watch stood: Since reports what came after it.
type Mark struct{ allocations, shared int }

// NewWatch is a Watch fed by hand (Observe); StartWatch feeds one from
// the API server.
func NewWatch() *Watch {
	return &Watch{holders: map[Device]map[types.UID]types.NamespacedName{}, held: map[types.UID][]Device{},
		deleting: map[types.UID]time.Time{}, unreserved: map[types.UID]bool{}, cancel: func() {}}
}

// StartWatch watches ResourceClaims in every namespace until Stop.
func StartWatch(ctx context.Context, cfg *rest.Config) (*Watch, error) {
	scheme := runtime.NewScheme()
	if err := resourceapi.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("resource claims: %w", err)
	}
	w := NewWatch()
	ctx, w.cancel = context.WithCancel(ctx)
	inf, err := c.GetInformer(ctx, &resourceapi.ResourceClaim{})
	if err != nil {
		w.cancel()
		return nil, fmt.Errorf("resource claims: %w", err)
	}
	observe := func(o any, gone bool) {
		if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if claim, ok := o.(*resourceapi.ResourceClaim); ok {
			w.Observe(claim, gone)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { observe(o, false) },
		UpdateFunc: func(_, o any) { observe(o, false) },
		DeleteFunc: func(o any) { observe(o, true) },
	}); err != nil {
		w.cancel()
		return nil, fmt.Errorf("resource claims: %w", err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		w.cancel()
		return nil, fmt.Errorf("resource claims: the watch did not sync")
	}
	return w, nil
}

// Stop ends the watch.
func (w *Watch) Stop() { w.cancel() }

// Observe takes a claim as the watch delivered it; gone says it was
// deleted. A deallocated or deleted claim frees its devices; a claim
// allocated a device another live claim holds is recorded as sharing.
func (w *Watch) Observe(claim *resourceapi.ResourceClaim, gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	name := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name + forPods(claim)}
	var now []Device
	if !gone && claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			now = append(now, Device{Driver: r.Driver, Pool: r.Pool, Name: r.Device})
		}
	}
	if gone {
		delete(w.deleting, claim.UID)
		delete(w.unreserved, claim.UID)
	} else {
		if ts := claim.DeletionTimestamp; ts != nil {
			w.deleting[claim.UID] = ts.Time
		}
		w.unreserved[claim.UID] = len(claim.Status.ReservedFor) == 0
	}
	before := w.held[claim.UID]
	if slices.Equal(before, now) {
		// A reservation written after the allocation names the pod; an
		// emptied one keeps the pod it was for, as evidence.
		if forPods(claim) != "" {
			for _, d := range before {
				w.holders[d][claim.UID] = name
			}
		}
		return
	}
	for _, d := range before {
		if delete(w.holders[d], claim.UID); len(w.holders[d]) == 0 {
			delete(w.holders, d)
		}
	}
	delete(w.held, claim.UID)
	if len(now) == 0 {
		return
	}
	w.allocations++
	w.held[claim.UID] = now
	for _, d := range now {
		for uid, other := range w.holders[d] {
			msg := fmt.Sprintf("device %s allocated to claim %s while claim %s held it", d, name, other)
			// Its pod may be gone, but until its allocation is, a kubelet
			// may still hold the device for it.
			switch at, deleting := w.deleting[uid]; {
			case deleting:
				msg += fmt.Sprintf(" (being deleted since %s, still allocated)", at.UTC().Format(time.RFC3339))
			case w.unreserved[uid]:
				msg += " (no longer reserved for a pod, still allocated)"
			}
			w.shared = append(w.shared, msg)
		}
		if w.holders[d] == nil {
			w.holders[d] = map[types.UID]types.NamespacedName{}
		}
		w.holders[d][claim.UID] = name
	}
}

// forPods names the pods a claim is reserved for, " (for pod a, b)", so
// that evidence of sharing says which pods (and nodes) to look at.
func forPods(claim *resourceapi.ResourceClaim) string {
	var pods []string
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" {
			pods = append(pods, r.Name)
		}
	}
	if len(pods) == 0 {
		return ""
	}
	return " (for pod " + strings.Join(pods, ", ") + ")"
}

// Mark is where the watch stands now.
func (w *Watch) Mark() Mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Mark{allocations: w.allocations, shared: len(w.shared)}
}

// Since reports the allocations seen after m and the devices they shared.
func (w *Watch) Since(m Mark) (allocations int, shared []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.allocations - m.allocations, append([]string(nil), w.shared[m.shared:]...)
}
