// Package measure observes a run from the client side, through watches, and
// never from the operator's own claims: per-cluster phase timestamps, gangs
// seen partially bound, and duplicate pods. It also scrapes Prometheus text
// metrics for before/after deltas.
package measure

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// Timeline is what the watches saw of one GPUCluster.
type Timeline struct {
	Created     time.Time // when the client sent the create
	PodGroup    time.Time // PodGroup first seen
	PodsCreated time.Time // all desired pods first seen
	AllBound    time.Time // all desired pods first seen bound
	PodsReady   time.Time // all desired pods first seen Ready
	StatusReady time.Time // status.phase Ready first seen
	Desired     int

	pods     map[string]*podState // by pod name
	partial  time.Time            // start of the current partial binding
	maxSplit time.Duration        // longest partial binding seen
	// tearing is set once the cluster's pods are being deleted: a gang
	// shrinking to nothing is not a partial placement.
	tearing bool
	// pgRV and firstPodRV are the creation revisions of the PodGroup and of
	// the earliest pod, from their ADDED watch events: the watch starts
	// before the cluster exists, so an ADDED event carries the revision the
	// object was created at, and one etcd orders them.
	pgRV, firstPodRV int64
	firstPod         string
}

type podState struct {
	uid   string
	bound bool
	ready bool
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
	// all-or-nothing. Default 2 s (two Volcano schedule periods).
	PartialGrace time.Duration
}

// Recorder watches one namespace.
type Recorder struct {
	in         RecorderInput
	mu         sync.Mutex
	clusters   map[string]*Timeline
	live       map[string]string // "cluster/group/index" → pod UID
	violations []Violation
	cancel     context.CancelFunc
}

// Start begins watching; Stop ends it.
func Start(ctx context.Context, in RecorderInput) (*Recorder, error) {
	if in.PartialGrace == 0 {
		in.PartialGrace = 2 * time.Second
	}
	r := &Recorder{in: in, clusters: map[string]*Timeline{}, live: map[string]string{}}
	c, err := cache.New(in.Config, cache.Options{Scheme: in.Scheme, DefaultNamespaces: map[string]cache.Config{in.Namespace: {}}})
	if err != nil {
		return nil, err
	}
	ctx, r.cancel = context.WithCancel(ctx)
	for _, obj := range []client.Object{&corev1.Pod{}, &schedulingv1beta1.PodGroup{}, &gpulabv1alpha1.GPUCluster{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			r.cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) {
				r.added(o)
				r.observe(o, false)
			},
			UpdateFunc: func(_, o any) { r.observe(o, false) },
			DeleteFunc: func(o any) {
				if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				r.observe(o, true)
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

// Expect registers a cluster about to be created with its desired pod count.
func (r *Recorder) Expect(name string, desired int, created time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.timeline(name)
	t.Desired, t.Created = desired, created
}

func (r *Recorder) timeline(name string) *Timeline {
	t, ok := r.clusters[name]
	if !ok {
		t = &Timeline{pods: map[string]*podState{}}
		r.clusters[name] = t
	}
	return t
}

// added records creation revisions for the PodGroup-before-pods check.
func (r *Recorder) added(o any) {
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	name := obj.GetLabels()[gpulabv1alpha1.ClusterLabel]
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if name == "" || err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.timeline(name)
	switch o.(type) {
	case *schedulingv1beta1.PodGroup:
		if t.pgRV == 0 {
			t.pgRV = rv
		}
	case *corev1.Pod:
		if t.firstPodRV == 0 || rv < t.firstPodRV {
			t.firstPodRV, t.firstPod = rv, obj.GetName()
		}
	}
}

func (r *Recorder) observe(o any, deleted bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch obj := o.(type) {
	case *schedulingv1beta1.PodGroup:
		name := obj.Labels[gpulabv1alpha1.ClusterLabel]
		if t := r.timeline(name); name != "" && !deleted && t.PodGroup.IsZero() {
			t.PodGroup = now
		}
	case *gpulabv1alpha1.GPUCluster:
		if t := r.timeline(obj.Name); !deleted && obj.Status.Phase == gpulabv1alpha1.ClusterReady && t.StatusReady.IsZero() {
			t.StatusReady = now
		}
	case *corev1.Pod:
		r.observePod(obj, deleted, now)
	}
}

func (r *Recorder) observePod(p *corev1.Pod, deleted bool, now time.Time) {
	name := p.Labels[gpulabv1alpha1.ClusterLabel]
	if name == "" {
		return
	}
	t := r.timeline(name)
	slot := name + "/" + p.Labels[gpulabv1alpha1.GroupLabel] + "/" + p.Labels[gpulabv1alpha1.IndexLabel]
	gone := deleted || !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	if gone {
		if deleted || !p.DeletionTimestamp.IsZero() {
			t.tearing = true
		}
		delete(t.pods, p.Name)
		if r.live[slot] == string(p.UID) {
			delete(r.live, slot)
		}
	} else {
		if uid, ok := r.live[slot]; ok && uid != string(p.UID) {
			r.violations = append(r.violations, Violation{Cluster: name, At: now,
				What: fmt.Sprintf("duplicate pod for %s: %s (uid %s) while uid %s is alive", slot, p.Name, p.UID, uid)})
		}
		r.live[slot] = string(p.UID)
		t.pods[p.Name] = &podState{uid: string(p.UID), bound: p.Spec.NodeName != "", ready: podReady(p)}
	}
	r.update(t, now)
}

// update advances a cluster's milestones and the partial-binding detector.
func (r *Recorder) update(t *Timeline, now time.Time) {
	bound, ready := 0, 0
	for _, s := range t.pods {
		if s.bound {
			bound++
		}
		if s.ready {
			ready++
		}
	}
	if t.Desired == 0 {
		return
	}
	if len(t.pods) >= t.Desired && t.PodsCreated.IsZero() {
		t.PodsCreated = now
	}
	if bound >= t.Desired && t.AllBound.IsZero() {
		t.AllBound = now
	}
	if ready >= t.Desired && t.PodsReady.IsZero() {
		t.PodsReady = now
	}
	partial := bound > 0 && bound < t.Desired && !t.tearing
	switch {
	case partial && t.partial.IsZero():
		t.partial = now
	case !partial && !t.partial.IsZero():
		t.maxSplit = max(t.maxSplit, now.Sub(t.partial))
		t.partial = time.Time{}
	}
}

// Violations returns the broken invariants seen so far, including gangs
// that are, or were, partly bound for longer than the grace period.
func (r *Recorder) Violations() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]Violation(nil), r.violations...)
	now := time.Now()
	for name, t := range r.clusters {
		split := t.maxSplit
		if !t.partial.IsZero() {
			split = max(split, now.Sub(t.partial))
		}
		if t.pgRV > 0 && t.firstPodRV > 0 && t.firstPodRV < t.pgRV {
			out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("pod %s was created (revision %d) before its PodGroup (revision %d): Volcano may bind part of the gang", t.firstPod, t.firstPodRV, t.pgRV)})
		}
		if split > r.in.PartialGrace {
			out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("gang %s was partly bound for %s (grace %s)", name, split.Round(time.Millisecond), r.in.PartialGrace)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
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

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
