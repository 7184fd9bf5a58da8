package measure

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sschedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// The watches' events turned into each gang's timeline.

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
