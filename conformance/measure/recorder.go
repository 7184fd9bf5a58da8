// Package measure observes a run from the client side, through watches, and
// never from the operator's own claims: per-cluster phase timestamps, gangs
// seen partially bound, duplicate pods, pods created while their PodGroup
// did not exist, and statuses that claim Ready before the pods are. It also
// scrapes Prometheus text metrics for before/after deltas.
package measure

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sschedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/internal/poll"
)

// Timeline is what the watches saw of one gang.
//
// Each milestone is the time it is proven to have happened by (proven):
// the watch receipt, capped at one second past the timestamp the API
// server recorded for it (creationTimestamp, a condition's
// lastTransitionTime, the operator's status time), which the API
// truncates to the second. A lagging watch therefore cannot stretch a
// phase by more than a second, and the suite's own client throttling
// (before the create reaches the server) is not in any phase.
type Timeline struct {
	Created     time.Time // the gang object created (creationTimestamp)
	PodGroup    time.Time // PodGroup created
	PodsCreated time.Time // all desired pods created
	AllBound    time.Time // all desired pods bound (PodScheduled)
	PodsReady   time.Time // all desired pods Ready
	// ClaimsAllocated is when every desired pod's ResourceClaims were
	// first seen allocated (RecorderInput.Claims; watch receipt: the API
	// records no allocation time unless DRADeviceBindingConditions is on).
	ClaimsAllocated time.Time
	// ClaimsCreated is when every desired pod's ResourceClaims existed
	// (their creationTimestamps, proven as the other milestones): before
	// it, kube-controller-manager was still making them from the
	// templates; after it, the scheduler allocates them.
	ClaimsCreated time.Time
	StatusReady   time.Time // status.phase Ready first seen
	// WatchLag is the longest a milestone's watch receipt came after the
	// server's own time for it could have been: the cross-check of the
	// two clocks (zero when the watch kept within the second).
	WatchLag time.Duration
	// BindSpread is first bind to last bind of the gang's members, once
	// all are bound (server-bounded times, as the milestones).
	BindSpread time.Duration
	// Desired is the pod count the spec asks for (head + Σ replicas), or
	// what Expect said before the GPUCluster was seen.
	Desired int
	// Pods is how many of the cluster's pod slots hold a live pod now.
	Pods int

	pods map[string]*podState // by pod name
	// The partial-placement detector. A gang with some but not all of its
	// slots bound is in flight while binds keep landing; it was placed
	// partly when an unbound member is marked Unschedulable after the
	// gang's first bind (the scheduler decided the rest do not fit), or
	// when no bind lands for longer than the stall limit.
	partial      time.Time     // start of the current partial binding
	maxSplit     time.Duration // longest partial binding seen
	lastBind     time.Time     // receipt of the latest bind while partial
	firstBindRV  int64         // revision of the current partial binding's first bind
	placedPartly string        // evidence of a partial placement, once seen
	bound        int           // bound slots at the last update
	sizedFor     int           // Desired at the last update
	// The server-side creation time the workload recorded.
	createdAt time.Time
	// disrupted is set when bound pods go away (deletion, exit) or the
	// gang is resized: a gang shrinking is not a partial placement. It
	// clears once the gang is whole again or has nothing bound, so the
	// detector is back on for the rest of the run.
	disrupted bool

	// Creation order, by etcd revision: one etcd orders pods, PodGroups
	// and GPUClusters, and the watches start before the cluster exists,
	// so an ADDED event carries the revision the object was created at
	// and a DELETED event the revision it was deleted at.
	podGroups  []podGroupLife
	created    map[string]podCreation // by pod UID
	deletedRV  int64                  // the GPUCluster deleted (or given a deletionTimestamp)
	claimRV    int64                  // status first claimed Ready
	claimAt    time.Time
	allReadyRV int64 // every desired slot first seen Ready (the latest of their Ready revisions)
	ready      int   // Ready slots at the last update
}

type podState struct {
	uid     string
	slot    string // cluster/group/index
	bound   bool
	ready   bool
	readyRV int64 // revision of the event that first showed it Ready
	// Server-side times: creationTimestamp and the lastTransitionTime of
	// PodScheduled=True and Ready=True (zero where not recorded).
	createdAt, boundAt, readyAt time.Time
	// unschedulable is the PodScheduled=False/Unschedulable condition as
	// last written, and markedRV the revision that wrote it: a scheduler
	// that decides again writes it again (a new message or time).
	unschedulable string
	markedRV      int64
	boundSeen     time.Time // receipt of the event that first showed it bound
	bindRV        int64     // revision of that event
	claims        []string  // its ResourceClaims, as its status names them
	claimsWanted  int       // the claims its spec asks for
}

// podGroupLife is one PodGroup object's existence, in revisions.
type podGroupLife struct {
	created, deleted int64 // deleted is 0 while it exists
	// deletedUnknown: the watch missed the deletion (a relist), so when it
	// happened is not known and pods after it are not judged.
	deletedUnknown bool
}

type podCreation struct {
	name    string
	rv      int64
	grouped bool // names a PodGroup (inGang)
	seen    time.Time
}

// Violation is a broken invariant the recorder saw.
type Violation struct {
	Cluster string
	What    string
	At      time.Time
}

// RecorderInput configures a Recorder.
type RecorderInput struct {
	Config    *rest.Config
	Scheme    *runtime.Scheme
	Namespace string
	// PartialGrace is how long a gang may be seen partly bound: the binder
	// binds a gang's pods one API call at a time, so an observer sees a
	// few milliseconds of partial binding even when the decision was
	// all-or-nothing. It is also how long evidence may lag between two
	// watches (a pod's event arriving after its PodGroup's, or after the
	// status that counted it) before a verdict that depends on it is
	// final. Default DefaultPartialGrace.
	PartialGrace time.Duration
	// BindStall is how long a partly bound gang may go without a new bind
	// before it counts as placed partly: binds of one scheduling decision
	// land one API call at a time, seconds apart on a saturated API
	// server. Default DefaultBindStall.
	BindStall time.Duration
	// NativeGangs follows Kubernetes' own PodGroups
	// (scheduling.k8s.io/v1beta1, kube-scheduler's gang scheduling) instead
	// of Volcano's; pods join one by spec.schedulingGroup.
	NativeGangs bool
	// Claims follows the ResourceClaims of the gangs' pods (GPUs through
	// DRA), for Timeline.ClaimsAllocated.
	Claims bool
	// Workload is the kind of gang followed. Default GPUClusters.
	Workload Workload
	// Follow says which gangs to record, by name. Nil follows every
	// one: right for a namespace the suite made. In a shared namespace the
	// others existed before the watches started, so their events carry
	// revisions of their last change, not of their creation, and would be
	// judged falsely.
	Follow func(cluster string) bool
}

// DefaultPartialGrace is two Volcano schedule periods.
const DefaultPartialGrace = 2 * time.Second

// DefaultBindStall is far above the longest gap between two binds of one
// gang measured at N=300 on a 2-core testbed (2.7 s).
const DefaultBindStall = 10 * time.Second

// Recorder watches one namespace.
type Recorder struct {
	in       RecorderInput
	mu       sync.Mutex
	clusters map[string]*Timeline
	// live holds the UIDs of the live pods in each "cluster/group/index" slot.
	live       map[string]map[string]bool
	violations []Violation
	// allocated is when each ResourceClaim was first seen allocated, and
	// podGang the gang of each pod, by name: a claim's owner is its pod.
	allocated map[string]time.Time
	// created is each ResourceClaim's creation, as first seen: its
	// creationTimestamp and the receipt, for Timeline.proven.
	created map[string][2]time.Time
	podGang map[string]string
	// The last revision each watch delivered: a watch delivers in revision
	// order, so what it has shown of any earlier revision is final.
	podRV, podGroupRV, clusterRV int64
	// changed is closed and replaced on every event, for WaitFor.
	changed chan struct{}
	cancel  context.CancelFunc
}

type eventKind int

const (
	added eventKind = iota
	updated
	deleted
	// deletedUnknown is a deletion the watch missed: the object is its last
	// state seen, not its state at deletion.
	deletedUnknown
)

func newRecorder(in RecorderInput) *Recorder {
	if in.PartialGrace == 0 {
		in.PartialGrace = DefaultPartialGrace
	}
	if in.BindStall == 0 {
		in.BindStall = DefaultBindStall
	}
	if in.Workload == nil {
		in.Workload = GPUClusters{}
	}
	return &Recorder{in: in, clusters: map[string]*Timeline{}, live: map[string]map[string]bool{},
		allocated: map[string]time.Time{}, created: map[string][2]time.Time{}, podGang: map[string]string{}, changed: make(chan struct{}), cancel: func() {}}
}

// Start begins watching; Stop ends it.
func Start(ctx context.Context, in RecorderInput) (*Recorder, error) {
	r := newRecorder(in)
	c, err := cache.New(in.Config, cache.Options{Scheme: in.Scheme, DefaultNamespaces: map[string]cache.Config{in.Namespace: {}},
		ByObject: watchedByObject(r.in.Workload)})
	if err != nil {
		return nil, err
	}
	ctx, r.cancel = context.WithCancel(ctx)
	watched := []client.Object{&corev1.Pod{}, r.in.Workload.Object()}
	if r.in.NativeGangs {
		watched = append(watched, &k8sschedulingv1beta1.PodGroup{})
	} else {
		watched = append(watched, &schedulingv1beta1.PodGroup{})
	}
	if r.in.Claims {
		watched = append(watched, &resourceapi.ResourceClaim{})
	}
	for _, obj := range watched {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			r.cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { r.event(o, added, time.Now()) },
			UpdateFunc: func(_, o any) { r.event(o, updated, time.Now()) },
			DeleteFunc: func(o any) {
				if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					r.event(d.Obj, deletedUnknown, time.Now())
					return
				}
				r.event(o, deleted, time.Now())
			},
		}); err != nil {
			r.cancel()
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		r.cancel()
		return nil, fmt.Errorf("recorder caches did not sync")
	}
	return r, nil
}

// Stop ends the watches.
func (r *Recorder) Stop() { r.cancel() }

// Expect registers a cluster about to be created with its desired pod
// count; the GPUCluster's spec, once seen, is the authority.
func (r *Recorder) Expect(name string, desired int, created time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.timeline(name)
	t.Desired, t.Created = desired, created
}

func (r *Recorder) timeline(name string) *Timeline {
	t, ok := r.clusters[name]
	if !ok {
		t = &Timeline{pods: map[string]*podState{}, created: map[string]podCreation{}}
		r.clusters[name] = t
	}
	return t
}

// event applies one watch event.
func (r *Recorder) event(o any, kind eventKind, now time.Time) {
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.notify()
	follow := func(name string) bool { return name != "" && (r.in.Follow == nil || r.in.Follow(name)) }
	owner := r.in.Workload.Kind()
	switch obj := obj.(type) {
	case *schedulingv1beta1.PodGroup, *k8sschedulingv1beta1.PodGroup:
		r.podGroupRV = max(r.podGroupRV, rv)
		if name := gangOf(obj, owner); follow(name) {
			r.observePodGroup(r.timeline(name), kind, rv, obj.GetCreationTimestamp().Time, now)
		}
	case *corev1.Pod:
		r.podRV = max(r.podRV, rv)
		if name := gangOf(obj, owner); follow(name) {
			r.podGang[obj.Name] = name
			r.observePod(name, r.timeline(name), obj, kind, rv, now)
		}
	case *resourceapi.ResourceClaim:
		if kind != added && kind != updated {
			return
		}
		changed := false
		if _, seen := r.created[obj.Name]; !seen {
			r.created[obj.Name], changed = [2]time.Time{obj.CreationTimestamp.Time, now}, true
		}
		if _, seen := r.allocated[obj.Name]; !seen && obj.Status.Allocation != nil {
			r.allocated[obj.Name], changed = now, true
		}
		if name, ok := r.podGang[gangOf(obj, "Pod")]; ok && changed {
			r.update(r.timeline(name), now)
		}
	default:
		if !r.isWorkload(obj) {
			return
		}
		r.clusterRV = max(r.clusterRV, rv)
		if follow(obj.GetName()) {
			r.observeWorkload(r.timeline(obj.GetName()), obj, kind, rv, now)
		}
	}
}

// isWorkload says whether obj is of the followed workload's type.
func (r *Recorder) isWorkload(obj client.Object) bool {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.GetKind() == r.in.Workload.Kind()
	}
	return reflect.TypeOf(obj) == reflect.TypeOf(r.in.Workload.Object())
}

func (r *Recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Recorder) observePodGroup(t *Timeline, kind eventKind, rv int64, created, now time.Time) {
	switch kind {
	case added:
		t.podGroups = append(t.podGroups, podGroupLife{created: rv})
		if t.PodGroup.IsZero() {
			t.PodGroup = t.proven(now, created)
		}
	case deleted, deletedUnknown:
		if n := len(t.podGroups); n > 0 && t.podGroups[n-1].deleted == 0 {
			t.podGroups[n-1].deleted, t.podGroups[n-1].deletedUnknown = rv, kind == deletedUnknown
		}
	}
}

func (r *Recorder) observeWorkload(t *Timeline, obj client.Object, kind eventKind, rv int64, now time.Time) {
	if kind == deleted || kind == deletedUnknown || !obj.GetDeletionTimestamp().IsZero() {
		if t.deletedRV == 0 {
			t.deletedRV = rv
		}
		return
	}
	if kind == added && t.createdAt.IsZero() {
		// The server's creation time replaces the client's send time:
		// the wait in the client's own rate limiter is not the stack's.
		t.createdAt = obj.GetCreationTimestamp().Time
		t.Created = t.proven(now, t.createdAt)
	}
	st := r.in.Workload.Read(obj)
	t.Desired = st.Desired
	if st.Ready && t.StatusReady.IsZero() {
		t.StatusReady = t.proven(now, st.ReadyAt)
	}
	if st.Claim && t.claimRV == 0 {
		t.claimRV, t.claimAt = rv, now
	}
	r.update(t, now)
}

func (r *Recorder) observePod(name string, t *Timeline, p *corev1.Pod, kind eventKind, rv int64, now time.Time) {
	uid := string(p.UID)
	if _, seen := t.created[uid]; !seen && kind == added {
		t.created[uid] = podCreation{name: p.Name, rv: rv, grouped: inGang(p), seen: now}
	}
	slot := r.in.Workload.Slot(name, p)
	gone := kind == deleted || kind == deletedUnknown || !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	if gone {
		if s, ok := t.pods[p.Name]; ok && s.uid == uid {
			delete(t.pods, p.Name)
		}
		delete(r.live[slot], uid)
	} else {
		if !r.live[slot][uid] {
			for other := range r.live[slot] {
				r.violations = append(r.violations, Violation{Cluster: name, At: now,
					What: fmt.Sprintf("duplicate pod for %s: %s (uid %s) while uid %s is alive", slot, p.Name, p.UID, other)})
				break
			}
			if r.live[slot] == nil {
				r.live[slot] = map[string]bool{}
			}
			r.live[slot][uid] = true
		}
		s := &podState{uid: uid, slot: slot, bound: p.Spec.NodeName != "", ready: podReady(p), createdAt: p.CreationTimestamp.Time}
		s.boundAt, s.readyAt = conditionTrueSince(p, corev1.PodScheduled), conditionTrueSince(p, corev1.PodReady)
		s.unschedulable = unschedulableMark(p)
		s.claimsWanted = len(p.Spec.ResourceClaims)
		for _, c := range p.Status.ResourceClaimStatuses {
			if c.ResourceClaimName != nil {
				s.claims = append(s.claims, *c.ResourceClaimName)
			}
		}
		prev := t.pods[p.Name]
		if prev != nil && prev.uid != uid {
			prev = nil
		}
		if s.ready && prev != nil && prev.ready {
			s.readyRV = prev.readyRV
		} else if s.ready {
			s.readyRV = rv
		}
		switch {
		case s.unschedulable == "":
		case prev != nil && prev.unschedulable == s.unschedulable:
			s.markedRV = prev.markedRV
		default:
			s.markedRV = rv
		}
		if prev != nil && prev.bound {
			s.boundSeen, s.bindRV = prev.boundSeen, prev.bindRV
		} else if s.bound {
			s.boundSeen, s.bindRV = now, rv
		}
		t.pods[p.Name] = s
	}
	r.update(t, now)
}

// allClaims is the latest of at over the claims of the gang's pods, once
// every desired slot has a pod and every pod that asks for claims has an
// at for each; zero before, or when no pod asks for one (a head without
// GPUs asks for none).
func (r *Recorder) allClaims(t *Timeline, at func(claim string) (time.Time, bool)) time.Time {
	var last time.Time
	slots, claiming := map[string]bool{}, 0
	for _, s := range t.pods {
		slots[s.slot] = true
		if s.claimsWanted == 0 {
			continue
		}
		if len(s.claims) < s.claimsWanted {
			return time.Time{}
		}
		for _, c := range s.claims {
			when, ok := at(c)
			if !ok {
				return time.Time{}
			}
			last = latest(last, when)
		}
		claiming++
	}
	if len(slots) < t.Desired || claiming == 0 {
		return time.Time{}
	}
	return last
}

// update advances a cluster's milestones and the partial-binding detector.
// It counts slots, not pods, so a duplicate in a slot does not make a gang
// look whole.
func (r *Recorder) update(t *Timeline, now time.Time) {
	slots, bound, ready := map[string]bool{}, map[string]bool{}, map[string]int64{}
	// The latest server time among the slots for each milestone, and the
	// first and last bind.
	var lastCreated, lastBound, lastReady, firstBound time.Time
	for _, s := range t.pods {
		slots[s.slot] = true
		lastCreated = latest(lastCreated, s.createdAt)
		if s.bound {
			bound[s.slot] = true
			at := t.proven(s.boundSeen, s.boundAt)
			lastBound = latest(lastBound, at)
			if firstBound.IsZero() || at.Before(firstBound) {
				firstBound = at
			}
		}
		if rv, ok := ready[s.slot]; s.ready && (!ok || s.readyRV < rv) {
			ready[s.slot] = s.readyRV
		}
		if s.ready {
			lastReady = latest(lastReady, s.readyAt)
		}
	}
	t.Pods, t.ready = len(slots), len(ready)
	if len(bound) < t.bound || (t.sizedFor != 0 && t.Desired != t.sizedFor && t.bound > 0) {
		t.disrupted = true
	}
	prevBound := t.bound
	t.bound, t.sizedFor = len(bound), t.Desired
	if t.Desired == 0 {
		return
	}
	if t.bound == 0 || t.bound >= t.Desired {
		t.disrupted = false
	}
	if len(slots) >= t.Desired && t.PodsCreated.IsZero() {
		t.PodsCreated = t.proven(now, lastCreated)
	}
	if t.bound >= t.Desired && t.AllBound.IsZero() {
		// Each bind time is already proven (bounded by its own event).
		t.AllBound, t.BindSpread = lastBound, lastBound.Sub(firstBound)
	}
	if len(ready) >= t.Desired && t.PodsReady.IsZero() {
		t.PodsReady = t.proven(now, lastReady)
		for _, rv := range ready {
			t.allReadyRV = max(t.allReadyRV, rv)
		}
	}
	if r.in.Claims && t.ClaimsAllocated.IsZero() {
		t.ClaimsAllocated = r.allClaims(t, func(c string) (time.Time, bool) { at, ok := r.allocated[c]; return at, ok })
	}
	if r.in.Claims && t.ClaimsCreated.IsZero() {
		t.ClaimsCreated = r.allClaims(t, func(c string) (time.Time, bool) {
			at, ok := r.created[c]
			return t.proven(at[1], at[0]), ok
		})
	}
	if !t.PodsReady.IsZero() && t.StatusReady.IsZero() && readyIsPodsReady(r.in.Workload) {
		t.StatusReady = t.PodsReady // no status to be Ready but the pods
	}
	partial := t.bound > 0 && t.bound < t.Desired && !t.disrupted
	switch {
	case partial && t.partial.IsZero():
		t.partial, t.lastBind, t.firstBindRV = now, now, 0
		for _, s := range t.pods {
			if s.bound && (t.firstBindRV == 0 || s.bindRV < t.firstBindRV) {
				t.firstBindRV = s.bindRV
			}
		}
	case partial && t.bound > prevBound:
		t.lastBind = now
	case !partial && !t.partial.IsZero():
		if t.placedPartly == "" {
			t.placedPartly = r.stalled(t, now)
		}
		t.maxSplit = max(t.maxSplit, now.Sub(t.partial))
		t.partial = time.Time{}
	}
	if partial && t.placedPartly == "" {
		for name, s := range t.pods {
			if !s.bound && s.markedRV > t.firstBindRV {
				t.placedPartly = fmt.Sprintf("%d of %d pods bound, then %s was marked unschedulable (revision %d, after the first bind at %d): %s",
					t.bound, t.Desired, name, s.markedRV, t.firstBindRV, s.unschedulable)
				break
			}
		}
	}
}

// stalled is the evidence that a partly bound gang has no bind in flight:
// none landed for longer than the stall limit. Empty while binds land.
func (r *Recorder) stalled(t *Timeline, now time.Time) string {
	if gap := now.Sub(t.lastBind); gap > r.in.BindStall {
		return fmt.Sprintf("%d of %d pods bound and no bind for %s (stall limit %s)", t.bound, t.Desired, gap.Round(time.Millisecond), r.in.BindStall)
	}
	return ""
}

// proven is when something is proven to have happened by: the watch
// receipt, but no later than one second past the server's own timestamp
// (the API truncates it to the second) and no earlier than it. It records
// how much later the watch was, the two clocks' cross-check.
func (t *Timeline) proven(receipt, server time.Time) time.Time {
	if server.IsZero() {
		return receipt
	}
	if receipt.Before(server) {
		return server
	}
	if limit := server.Add(time.Second); receipt.After(limit) {
		t.WatchLag = max(t.WatchLag, receipt.Sub(limit))
		return limit
	}
	return receipt
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Violations returns the broken invariants seen so far whose evidence is
// complete: duplicate pods; gangs that are, or were, partly bound for
// longer than the grace; pods created before their PodGroup, after it was
// deleted, or with none ever appearing; statuses that claimed Ready before
// every pod was seen Ready.
func (r *Recorder) Violations() []Violation {
	v, _ := r.judge(time.Now())
	return v
}

// Pending describes the suspicions not yet decided either way: a partial
// binding still within its grace, or a verdict waiting on a watch that may
// lag. Settle waits for them.
func (r *Recorder) Pending() []string {
	_, p := r.judge(time.Now())
	return p
}

// Settle waits until nothing is pending, so Violations is the whole verdict.
func (r *Recorder) Settle(ctx context.Context, timeout time.Duration) error {
	return poll.Until(ctx, timeout, func() (bool, string) {
		p := r.Pending()
		return len(p) == 0, strings.Join(p, "; ")
	})
}

func (r *Recorder) judge(now time.Time) (out []Violation, pending []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out = append(out, r.violations...)
	names := make([]string, 0, len(r.clusters))
	for name := range r.clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := r.clusters[name]
		evidence := t.placedPartly
		if evidence == "" && !t.partial.IsZero() {
			if stalled := r.stalled(t, now); stalled != "" {
				evidence = stalled
			} else {
				pending = append(pending, fmt.Sprintf("gang %s partly bound for %s, binds in flight", name, now.Sub(t.partial).Round(time.Millisecond)))
			}
		}
		if evidence != "" {
			out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("gang %s was partly bound: %s", name, evidence)})
		}
		v, p := r.judgePodGroups(name, t, now)
		out, pending = append(out, v...), append(pending, p...)
		v, p = r.judgeReadyClaim(name, t, now)
		out, pending = append(out, v...), append(pending, p...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, pending
}

type podGroupVerdict int

const (
	covered podGroupVerdict = iota
	undecidable
	beforePodGroup
	afterPodGroupDeleted
	noPodGroup
)

// coverage says whether a PodGroup existed at revision rv and, if not,
// the revisions around the gap.
func coverage(lives []podGroupLife, rv int64) (v podGroupVerdict, deletedAt, createdAt int64) {
	for i, l := range lives {
		if rv < l.created {
			if i == 0 {
				return beforePodGroup, 0, l.created
			}
			if lives[i-1].deletedUnknown {
				return undecidable, 0, 0
			}
			return afterPodGroupDeleted, lives[i-1].deleted, l.created
		}
		if l.deleted == 0 || rv < l.deleted {
			return covered, 0, 0
		}
	}
	if len(lives) == 0 {
		return noPodGroup, 0, 0
	}
	if last := lives[len(lives)-1]; !last.deletedUnknown {
		return afterPodGroupDeleted, last.deleted, 0
	}
	return undecidable, 0, 0
}

// judgePodGroups checks that a PodGroup existed when each of the cluster's
// gang pods was created: a pod without its PodGroup can be bound on its own.
func (r *Recorder) judgePodGroups(name string, t *Timeline, now time.Time) (out []Violation, pending []string) {
	type offence struct {
		pod                    podCreation
		deletedAt, recreatedAt int64
		n                      int
	}
	first := map[podGroupVerdict]*offence{}
	for _, pc := range t.created {
		if !pc.grouped || (t.deletedRV > 0 && pc.rv > t.deletedRV) {
			// Not a gang member, or created after its cluster was deleted:
			// garbage the collector removes with it.
			continue
		}
		v, deletedAt, createdAt := coverage(t.podGroups, pc.rv)
		if v == covered || v == undecidable {
			continue
		}
		// Final once the PodGroup and GPUCluster watches have passed the
		// pod's revision; until then a lagging event may still cover it.
		if (r.podGroupRV <= pc.rv || r.clusterRV <= pc.rv) && now.Sub(pc.seen) <= r.in.PartialGrace {
			pending = append(pending, fmt.Sprintf("pod %s: waiting for the PodGroup watch to pass revision %d", pc.name, pc.rv))
			continue
		}
		o := first[v]
		if o == nil {
			o = &offence{}
			first[v] = o
		}
		o.n++
		if o.n == 1 || pc.rv < o.pod.rv {
			o.pod, o.deletedAt, o.recreatedAt = pc, deletedAt, createdAt
		}
	}
	more := func(o *offence) string {
		if o.n > 1 {
			return fmt.Sprintf(" (and %d more pods)", o.n-1)
		}
		return ""
	}
	if o := first[beforePodGroup]; o != nil {
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("pod %s was created (revision %d) before its PodGroup (revision %d)%s: the scheduler may bind part of the gang",
			o.pod.name, o.pod.rv, o.recreatedAt, more(o))})
	}
	if o := first[afterPodGroupDeleted]; o != nil {
		recreated := "and was not recreated"
		if o.recreatedAt > 0 {
			recreated = fmt.Sprintf("and recreated at revision %d", o.recreatedAt)
		}
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("pod %s was created (revision %d) after its PodGroup was deleted (revision %d) %s%s: the scheduler may bind part of the gang",
			o.pod.name, o.pod.rv, o.deletedAt, recreated, more(o))})
	}
	if o := first[noPodGroup]; o != nil {
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("pod %s was created (revision %d) and its PodGroup never appeared%s: the scheduler cannot gang-schedule it",
			o.pod.name, o.pod.rv, more(o))})
	}
	return out, pending
}

// judgeReadyClaim checks that the status first claimed Ready (phase Ready
// or Ready=True) after the suite saw every desired pod Ready.
func (r *Recorder) judgeReadyClaim(name string, t *Timeline, now time.Time) (out []Violation, pending []string) {
	switch {
	case t.claimRV == 0 || t.Desired == 0 || (t.allReadyRV > 0 && t.allReadyRV < t.claimRV):
	case t.allReadyRV > t.claimRV:
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("GPUCluster %s status claimed Ready (revision %d) before every pod was Ready (revision %d)",
			name, t.claimRV, t.allReadyRV)})
	case r.podRV > t.claimRV || now.Sub(t.claimAt) > r.in.PartialGrace:
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("GPUCluster %s status claimed Ready (revision %d) while the suite had seen only %d of %d pods Ready",
			name, t.claimRV, t.ready, t.Desired)})
	default:
		pending = append(pending, fmt.Sprintf("GPUCluster %s claims Ready: waiting for the pod watch to pass revision %d", name, t.claimRV))
	}
	return out, pending
}

// WaitFor returns once cond holds for the named cluster's timeline. It
// checks on every event the watches deliver, not on a timer, so a caller
// reacting to a moment (killing the operator mid-creation) reacts within
// the watch latency.
func (r *Recorder) WaitFor(ctx context.Context, timeout time.Duration, name string, cond func(Timeline) bool) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		ok := false
		if t, found := r.clusters[name]; found {
			ok = cond(*t)
		}
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("cluster %s: condition not met within %s", name, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Timelines copies every cluster's timeline.
func (r *Recorder) Timelines() map[string]Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Timeline, len(r.clusters))
	for k, v := range r.clusters {
		out[k] = *v
	}
	return out
}

// LongestPartial is the longest any gang was seen partly bound, a
// partial binding still going included (within the grace it is the
// binder's one-call-per-pod, beyond it a violation).
func (r *Recorder) LongestPartial(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var longest time.Duration
	for _, t := range r.clusters {
		longest = max(longest, t.maxSplit)
		if !t.partial.IsZero() {
			longest = max(longest, now.Sub(t.partial))
		}
	}
	return longest
}

// Bound says how many of a cluster's live pods are bound.
func (r *Recorder) Bound(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	if t, ok := r.clusters[name]; ok {
		for _, s := range t.pods {
			if s.bound {
				n++
			}
		}
	}
	return n
}

// inGang says whether a pod names a PodGroup: Volcano's by the
// scheduling.k8s.io/group-name annotation, Kubernetes' own by
// spec.schedulingGroup.
func inGang(p *corev1.Pod) bool {
	return p.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey] != "" ||
		(p.Spec.SchedulingGroup != nil && p.Spec.SchedulingGroup.PodGroupName != nil)
}

// conditionTrueSince is the lastTransitionTime of a True condition of the
// pod, zero if it is not True.
func conditionTrueSince(p *corev1.Pod, typ corev1.PodConditionType) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// unschedulableMark is the PodScheduled=False/Unschedulable condition as
// the scheduler wrote it (reason, message and times), or "".
func unschedulableMark(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return fmt.Sprintf("%s (%s, probed %s)", c.Message, c.LastTransitionTime.UTC().Format(time.RFC3339), c.LastProbeTime.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
