// Package measure observes a run from the client side, through watches, and
// never from the operator's own claims: per-cluster phase timestamps, gangs
// seen partially bound, duplicate pods, pods created while their PodGroup
// did not exist, and statuses that claim Ready before the pods are. It also
// scrapes Prometheus text metrics for before/after deltas.
package measure

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sschedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
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
	// Issued is when the suite issued the gang object's create (Expect's
	// time): its create already held a slot of the burst, so the wait
	// for one is outside every phase, alike for every workload.
	Issued time.Time
	// Created is when the gang object was created (creationTimestamp,
	// proven): every phase's start. Before the object is seen, Issued.
	Created     time.Time
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

// Expect registers a cluster whose create is being issued at created with
// its desired pod count; the GPUCluster's spec, once seen, is the
// authority for the count, and its creation for the start.
func (r *Recorder) Expect(name string, desired int, created time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.timeline(name)
	t.Desired, t.Issued, t.Created = desired, created, created
}

func (r *Recorder) timeline(name string) *Timeline {
	t, ok := r.clusters[name]
	if !ok {
		t = &Timeline{pods: map[string]*podState{}, created: map[string]podCreation{}}
		r.clusters[name] = t
	}
	return t
}
