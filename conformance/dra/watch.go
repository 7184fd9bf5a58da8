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
	claims      map[types.UID]*heldClaim // the claims allocated devices now
	holders     map[Device][]types.UID   // device → the claims allocated it
	allocations int
	shared      []sharing
	// history is every claim's changes as the watch received them, so
	// that a sharing's evidence says what came before and after it.
	history map[types.UID]*claimHistory
	start   time.Time
	cancel  context.CancelFunc
}

// sharing is one device allocated to claim while holder held it.
type sharing struct {
	text          string
	claim, holder types.UID
}

// claimHistory is what a claim went through: its allocation, reservation
// and deletion, each change with the time it was received and the
// claim's resourceVersion.
type claimHistory struct {
	name   string
	last   string
	events []string
}

// historyLen is how many of a claim's last changes the evidence shows.
const historyLen = 8

// heldClaim is an allocated claim, as the evidence of sharing names it.
type heldClaim struct {
	name       string // namespace/name and, once reserved, its pods
	devices    []Device
	deleting   time.Time // its deletionTimestamp, once set
	unreserved bool      // reserved for no pod (its pod gone), still allocated
}

// Mark is where a Watch stood: Since reports what came after it.
type Mark struct{ allocations, shared int }

// NewWatch is a Watch fed by hand (Observe); StartWatch feeds one from
// the API server.
func NewWatch() *Watch {
	return &Watch{claims: map[types.UID]*heldClaim{}, holders: map[Device][]types.UID{}, history: map[types.UID]*claimHistory{},
		start: time.Now(), cancel: func() {}}
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
	var now []Device
	if !gone && claim.Status.Allocation != nil {
		for _, r := range claim.Status.Allocation.Devices.Results {
			now = append(now, Device{Driver: r.Driver, Pool: r.Pool, Name: r.Device})
		}
	}
	w.record(claim, gone, now)
	held := w.claims[claim.UID]
	if held != nil && slices.Equal(held.devices, now) {
		held.update(claim)
		return
	}
	if held != nil {
		for _, d := range held.devices {
			if w.holders[d] = slices.DeleteFunc(w.holders[d], func(uid types.UID) bool { return uid == claim.UID }); len(w.holders[d]) == 0 {
				delete(w.holders, d)
			}
		}
		delete(w.claims, claim.UID)
	}
	if len(now) == 0 {
		return
	}
	w.allocations++
	held = &heldClaim{devices: now}
	held.update(claim)
	w.claims[claim.UID] = held
	// One record per claim that still held some of them, naming them all.
	var holders []types.UID
	taken := map[types.UID][]string{}
	for _, d := range now {
		for _, uid := range w.holders[d] {
			if taken[uid] == nil {
				holders = append(holders, uid)
			}
			taken[uid] = append(taken[uid], d.String())
		}
		w.holders[d] = append(w.holders[d], claim.UID)
	}
	for _, uid := range holders {
		what, them := "device "+taken[uid][0], "it"
		if len(taken[uid]) > 1 {
			what, them = "devices "+strings.Join(taken[uid], ", "), "them"
		}
		w.shared = append(w.shared, sharing{
			text:  fmt.Sprintf("%s allocated to claim %s while claim %s", what, held.name, w.claims[uid].evidence(them)),
			claim: claim.UID, holder: uid,
		})
	}
}

// record adds the claim's change, if it is one, to its history.
func (w *Watch) record(claim *resourceapi.ResourceClaim, gone bool, devices []Device) {
	h := w.history[claim.UID]
	if h == nil {
		h = &claimHistory{name: claim.Namespace + "/" + claim.Name}
		w.history[claim.UID] = h
	}
	var state []string
	switch {
	case gone:
		state = append(state, "deleted")
	case len(devices) == 0:
		state = append(state, "not allocated")
	default:
		names := make([]string, len(devices))
		for i, d := range devices {
			names[i] = d.Pool + "/" + d.Name
		}
		state = append(state, "allocated "+strings.Join(names, ","))
	}
	if pods := forPods(claim); pods != "" && !gone {
		state = append(state, "reserved"+pods)
	}
	if claim.DeletionTimestamp != nil && !gone {
		state = append(state, "being deleted")
	}
	desc := strings.Join(state, ", ")
	if desc == h.last {
		return
	}
	h.last = desc
	h.events = append(h.events, fmt.Sprintf("+%.3fs rv %s %s", time.Since(w.start).Seconds(), claim.ResourceVersion, desc))
}

// historyOf is a claim's last changes, for evidence.
func (w *Watch) historyOf(uid types.UID) string {
	h := w.history[uid]
	if h == nil {
		return ""
	}
	events := h.events
	if len(events) > historyLen {
		events = events[len(events)-historyLen:]
	}
	return h.name + ": " + strings.Join(events, "; ")
}

// update takes what the claim says now. A reservation written after the
// allocation names the pods; an emptied one keeps the pods it was for, as
// evidence.
func (h *heldClaim) update(claim *resourceapi.ResourceClaim) {
	if pods := forPods(claim); pods != "" || h.name == "" {
		h.name = claim.Namespace + "/" + claim.Name + pods
	}
	if ts := claim.DeletionTimestamp; ts != nil {
		h.deleting = ts.Time
	}
	h.unreserved = len(claim.Status.ReservedFor) == 0
}

// evidence is the claim's name and, where its pod may be gone, why it
// still holds its devices (them: "it" or "them"): until its allocation is gone, a kubelet may
// still hold them for it.
func (h *heldClaim) evidence(them string) string {
	switch {
	case !h.deleting.IsZero():
		return h.name + fmt.Sprintf(" held %s (being deleted since %s, still allocated)", them, h.deleting.UTC().Format(time.RFC3339))
	case h.unreserved:
		return h.name + " held " + them + " (no longer reserved for a pod, still allocated)"
	}
	return h.name + " held " + them
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
// Each sharing is followed by both claims' histories up to now: whether
// the sharing lasted (both still allocated the device) or how it ended.
func (w *Watch) Since(m Mark) (allocations int, shared []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, sh := range w.shared[m.shared:] {
		shared = append(shared, sh.text+". History: "+w.historyOf(sh.claim)+" | "+w.historyOf(sh.holder))
	}
	return w.allocations - m.allocations, shared
}
