package measure

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sschedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// The detectors are fed recorded watch events; `now` is passed in, so a
// grace period passes without sleeping.

const grace = time.Second

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// pod is a gang member in slot cluster/w/index, at revision rv, bound to
// node ("" for pending), naming the cluster's PodGroup.
func pod(cluster, index, uid, node string, rv int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cluster + "-w-" + index, UID: types.UID(uid), ResourceVersion: strconv.Itoa(rv),
			OwnerReferences: ownedBy("GPUCluster", cluster),
			Labels: map[string]string{
				gpulabv1alpha1.ClusterLabel: cluster, gpulabv1alpha1.GroupLabel: "w", gpulabv1alpha1.IndexLabel: index},
			Annotations: map[string]string{schedulingv1beta1.KubeGroupNameAnnotationKey: cluster + "-pg"}},
		Spec: corev1.PodSpec{NodeName: node},
	}
}

func ready(p *corev1.Pod) *corev1.Pod {
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return p
}

func podGroup(cluster string, rv int) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: cluster + "-pg", ResourceVersion: strconv.Itoa(rv),
		OwnerReferences: ownedBy("GPUCluster", cluster), Labels: map[string]string{gpulabv1alpha1.ClusterLabel: cluster}}}
}

// ownedBy is a controller owner reference, as operators set them.
func ownedBy(kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: name, UID: types.UID(name), Controller: new(true)}}
}

// gpuCluster has workers worker replicas (so workers+1 desired pods).
func gpuCluster(name string, workers int32, rv int, phase gpulabv1alpha1.ClusterPhase) *gpulabv1alpha1.GPUCluster {
	return &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv)},
		Spec:       gpulabv1alpha1.GPUClusterSpec{WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "w", Replicas: workers}}},
		Status:     gpulabv1alpha1.GPUClusterStatus{Phase: phase},
	}
}

func newTestRecorder() *Recorder {
	return newRecorder(RecorderInput{PartialGrace: grace, BindStall: grace})
}

// withPodGroups gives each cluster a PodGroup created before anything
// else (revision 0), for tests about other invariants.
func withPodGroups(r *Recorder, clusters ...string) *Recorder {
	for _, c := range clusters {
		r.event(podGroup(c, 0), added, t0)
	}
	return r
}

func violations(r *Recorder, now time.Time) []Violation {
	v, _ := r.judge(now)
	return v
}

func wantViolation(t *testing.T, v []Violation, cluster, what string) {
	t.Helper()
	if len(v) != 1 || v[0].Cluster != cluster || !strings.Contains(v[0].What, what) {
		t.Fatalf("violations %v, want one for %s containing %q", v, cluster, what)
	}
}

func TestPartialBindingDetector(t *testing.T) {
	r := withPodGroups(newTestRecorder(), "g", "h")
	r.Expect("g", 2, t0)
	r.event(pod("g", "0", "a", "", 1), added, at(0))
	r.event(pod("g", "1", "b", "", 2), added, at(0))
	r.event(pod("g", "0", "a", "n0", 3), updated, at(10*time.Millisecond)) // binder binds the first pod...
	r.event(pod("g", "1", "b", "n1", 4), updated, at(20*time.Millisecond)) // ...and the second at once
	r.Expect("h", 2, t0)
	r.event(pod("h", "0", "c", "n0", 5), added, at(0)) // one pod bound, the other never
	if v, p := r.judge(at(grace / 2)); len(v) != 0 || len(p) != 1 {
		t.Fatalf("within the grace: violations %v, pending %v; want h pending only", v, p)
	}
	wantViolation(t, violations(r, at(2*grace)), "h", "partly bound")
	tl := r.Timelines()["g"]
	if tl.PodsCreated.IsZero() || tl.AllBound.IsZero() || tl.AllBound.Before(tl.PodsCreated) {
		t.Errorf("timeline %+v", tl)
	}
}

// A gang torn down (its pods deleted one by one) is not partly bound; but
// the detector is back on once nothing is bound, and a deleted pod that was
// never bound does not switch it off at all.
func TestPartialBindingAfterDeletions(t *testing.T) {
	r := withPodGroups(newTestRecorder(), "g")
	r.Expect("g", 2, t0)
	r.event(pod("g", "0", "a", "n0", 1), added, at(0))
	r.event(pod("g", "1", "b", "n1", 2), added, at(0))
	r.event(pod("g", "0", "a", "n0", 3), deleted, at(time.Second))
	r.event(pod("g", "1", "b", "n1", 4), deleted, at(5*time.Second)) // slow teardown, longer than the grace
	if v := violations(r, at(10*time.Second)); len(v) != 0 {
		t.Fatalf("a teardown was reported: %v", v)
	}
	// The gang comes back (a resume) and is bound partly.
	r.event(pod("g", "0", "c", "n0", 5), added, at(20*time.Second))
	r.event(pod("g", "1", "d", "", 6), added, at(20*time.Second))
	wantViolation(t, violations(r, at(25*time.Second)), "g", "partly bound")

	r = withPodGroups(newTestRecorder(), "h")
	r.Expect("h", 2, t0)
	r.event(pod("h", "0", "a", "", 1), added, at(0))
	r.event(pod("h", "0", "a", "", 2), deleted, at(0)) // an unbound pod replaced
	r.event(pod("h", "0", "b", "n0", 3), added, at(time.Second))
	r.event(pod("h", "1", "c", "", 4), added, at(time.Second))
	wantViolation(t, violations(r, at(5*time.Second)), "h", "partly bound")
}

// A cluster the suite never registered (a GPUJob's retry, another
// client's) is judged from its spec.
func TestPartialBindingOfUnregisteredCluster(t *testing.T) {
	r := withPodGroups(newTestRecorder(), "job-2")
	r.event(pod("job-2", "0", "a", "n0", 1), added, at(0)) // seen before its GPUCluster
	r.event(gpuCluster("job-2", 1, 2, gpulabv1alpha1.ClusterScheduling), added, at(0))
	r.event(pod("job-2", "1", "b", "", 3), added, at(0))
	v := violations(r, at(5*time.Second))
	wantViolation(t, v, "job-2", "partly bound")
	if d := r.Timelines()["job-2"].Desired; d != 2 {
		t.Errorf("desired %d, want 2 from the spec", d)
	}
}

func TestDuplicatePodDetector(t *testing.T) {
	r := withPodGroups(newTestRecorder(), "d")
	r.Expect("d", 1, t0)
	r.event(pod("d", "0", "a", "", 1), added, at(0))
	// A replacement after the old pod is gone is fine.
	r.event(pod("d", "0", "a", "", 2), deleted, at(0))
	r.event(pod("d", "0", "b", "", 3), added, at(0))
	if v := violations(r, at(0)); len(v) != 0 {
		t.Fatalf("a replacement was reported: %v", v)
	}
	// A second live pod in the same slot (even under another name) is not,
	// and is reported once however many events it has.
	dup := pod("d", "0", "c", "", 4)
	dup.Name = "d-w-0-dup"
	r.event(dup, added, at(0))
	r.event(dup, updated, at(0))
	wantViolation(t, violations(r, at(0)), "d", "duplicate pod for d/w/0")
	// The duplicate does not make the slot count twice.
	if tl := r.Timelines()["d"]; tl.Pods != 1 {
		t.Errorf("%d slots with a live pod, want 1", tl.Pods)
	}
}

func TestLongestPartial(t *testing.T) {
	r := newTestRecorder()
	r.Expect("g", 2, t0)
	r.event(pod("g", "0", "a", "", 1), added, at(0))
	r.event(pod("g", "1", "b", "", 2), added, at(0))
	r.event(pod("g", "0", "a", "n", 3), updated, at(0))
	if d := r.LongestPartial(at(300 * time.Millisecond)); d != 300*time.Millisecond {
		t.Errorf("a partial binding going on for 300ms: longest %s", d)
	}
	r.event(pod("g", "1", "b", "n", 4), updated, at(500*time.Millisecond))
	if d := r.LongestPartial(at(time.Minute)); d != 500*time.Millisecond {
		t.Errorf("after a 500ms partial binding: longest %s", d)
	}
}

func TestPodsBeforePodGroupDetector(t *testing.T) {
	r := newTestRecorder()
	r.Expect("early", 1, t0)
	r.event(pod("early", "0", "a", "", 100), added, at(0))
	r.event(podGroup("early", 101), added, at(0))
	r.Expect("ok", 1, t0)
	r.event(podGroup("ok", 200), added, at(0))
	r.event(pod("ok", "0", "b", "", 201), added, at(0))
	r.event(gpuCluster("ok", 0, 202, gpulabv1alpha1.ClusterScheduling), updated, at(0))
	wantViolation(t, violations(r, at(0)), "early", "before its PodGroup (revision 101)")
}

func TestPodGroupNeverAppears(t *testing.T) {
	r := newTestRecorder()
	r.Expect("lost", 1, t0)
	r.event(pod("lost", "0", "a", "", 10), added, at(0))
	// The PodGroup watch may lag the pod watch: not a verdict yet.
	if v, p := r.judge(at(grace / 2)); len(v) != 0 || len(p) != 1 {
		t.Fatalf("violations %v, pending %v; want one pending", v, p)
	}
	wantViolation(t, violations(r, at(2*grace)), "lost", "its PodGroup never appeared")

	// A lagging PodGroup event that covers the pod clears the suspicion.
	r = newTestRecorder()
	r.event(podGroup("late", 9), added, at(grace/2))
	r.event(pod("late", "0", "a", "", 10), added, at(0))
	if v := violations(r, at(2*grace)); len(v) != 0 {
		t.Fatalf("violations %v for a PodGroup created first", v)
	}

	// Pods of a default-scheduler cluster name no PodGroup.
	r = newTestRecorder()
	p := pod("plain", "0", "a", "", 10)
	p.Annotations = nil
	r.event(p, added, at(0))
	if v := violations(r, at(2*grace)); len(v) != 0 {
		t.Fatalf("violations %v for pods without a gang", v)
	}
}

func TestPodAfterPodGroupDeletedDetector(t *testing.T) {
	r := newTestRecorder()
	r.Expect("g", 2, t0)
	r.event(podGroup("g", 10), added, at(0))
	r.event(pod("g", "0", "a", "", 11), added, at(0))
	r.event(podGroup("g", 12), deleted, at(0))
	r.event(pod("g", "1", "b", "", 13), added, at(0))
	r.event(podGroup("g", 14), added, at(0))
	r.event(gpuCluster("g", 1, 15, gpulabv1alpha1.ClusterScheduling), updated, at(0))
	wantViolation(t, violations(r, at(0)), "g", "pod g-w-1 was created (revision 13) after its PodGroup was deleted (revision 12) and recreated at revision 14")

	// The cluster's own deletion removes its PodGroup: a pod created after
	// that is garbage, not a placement.
	r = newTestRecorder()
	r.event(podGroup("gone", 10), added, at(0))
	r.event(pod("gone", "0", "a", "n0", 11), added, at(0))
	r.event(gpuCluster("gone", 0, 12, ""), deleted, at(0))
	r.event(podGroup("gone", 13), deleted, at(0))
	r.event(pod("gone", "0", "a", "n0", 14), deleted, at(0))
	r.event(pod("gone", "0", "b", "", 15), added, at(0))
	if v := violations(r, at(5*time.Second)); len(v) != 0 {
		t.Fatalf("violations %v for a pod created after its cluster was deleted", v)
	}
}

func TestReadyClaimDetector(t *testing.T) {
	// Honest: every pod Ready (revisions 5, 6) before the status says so (7).
	r := newTestRecorder()
	r.event(gpuCluster("ok", 1, 1, gpulabv1alpha1.ClusterScheduling), added, at(0))
	r.event(podGroup("ok", 2), added, at(0))
	r.event(pod("ok", "0", "a", "n0", 3), added, at(0))
	r.event(pod("ok", "1", "b", "n1", 4), added, at(0))
	r.event(ready(pod("ok", "0", "a", "n0", 5)), updated, at(0))
	// The status event arrives before the pod watch delivers revision 6.
	r.event(gpuCluster("ok", 1, 7, gpulabv1alpha1.ClusterReady), updated, at(0))
	if v, p := r.judge(at(grace / 2)); len(v) != 0 || len(p) != 1 {
		t.Fatalf("violations %v, pending %v; want the claim pending on the pod watch", v, p)
	}
	r.event(ready(pod("ok", "1", "b", "n1", 6)), updated, at(grace/2))
	if v, p := r.judge(at(2 * grace)); len(v) != 0 || len(p) != 0 {
		t.Fatalf("violations %v, pending %v for an honest Ready", v, p)
	}

	// Early: Ready claimed (3) before the pods were bound, let alone Ready (6, 7).
	r = newTestRecorder()
	r.event(podGroup("early", 1), added, at(0))
	r.event(pod("early", "0", "a", "", 2), added, at(0))
	r.event(gpuCluster("early", 1, 3, gpulabv1alpha1.ClusterReady), updated, at(0))
	r.event(pod("early", "1", "b", "", 4), added, at(0))
	r.event(ready(pod("early", "0", "a", "n0", 6)), updated, at(0))
	r.event(ready(pod("early", "1", "b", "n1", 7)), updated, at(0))
	wantViolation(t, violations(r, at(0)), "early", "claimed Ready (revision 3) before every pod was Ready (revision 7)")

	// Ready=True alone is a claim, and pods never Ready are evidence once
	// the grace passes.
	r = withPodGroups(newTestRecorder(), "cond")
	gc := gpuCluster("cond", 1, 3, gpulabv1alpha1.ClusterProvisioning)
	gc.Status.Conditions = []metav1.Condition{{Type: gpulabv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}
	r.event(pod("cond", "0", "a", "", 2), added, at(0))
	r.event(gc, updated, at(0))
	wantViolation(t, violations(r, at(2*grace)), "cond", "claimed Ready (revision 3) while the suite had seen only 0 of 2 pods Ready")
}

func TestWaitForReactsToEvents(t *testing.T) {
	r := newTestRecorder()
	r.Expect("w", 2, t0)
	done := make(chan error, 1)
	go func() {
		done <- r.WaitFor(context.Background(), time.Minute, "w", func(tl Timeline) bool { return tl.Pods > 0 })
	}()
	r.event(pod("w", "0", "a", "", 1), added, time.Now())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := r.WaitFor(context.Background(), 10*time.Millisecond, "w", func(tl Timeline) bool { return tl.Pods > 1 }); err == nil {
		t.Fatal("WaitFor returned for a condition that never held")
	}
}

// In a shared namespace the clusters that were there before the watches
// look like pods made before their PodGroup (events carry their last
// revision); Follow keeps them out of the verdicts.
func TestFollowIgnoresOtherClusters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		follow func(string) bool
		want   int
	}{
		{"every cluster", nil, 1},
		{"only the suite's", func(name string) bool { return name == "mine" }, 0},
	} {
		r := newRecorder(RecorderInput{PartialGrace: grace, Follow: tc.follow})
		r.event(pod("theirs", "0", "a", "node-1", 100), added, at(0))
		r.event(podGroup("theirs", 101), added, at(0))
		r.Expect("mine", 1, t0)
		r.event(podGroup("mine", 200), added, at(0))
		r.event(pod("mine", "0", "b", "", 201), added, at(0))
		if v := violations(r, at(2*grace)); len(v) != tc.want {
			t.Errorf("%s: violations %v, want %d", tc.name, v, tc.want)
		}
		if _, seen := r.Timelines()["theirs"]; seen != (tc.follow == nil) {
			t.Errorf("%s: the other cluster recorded: %v", tc.name, seen)
		}
	}
}

// bind marks p bound to node at server time at (PodScheduled=True), as
// the API server's binding does.
func bind(p *corev1.Pod, node string, at time.Time) *corev1.Pod {
	p.Spec.NodeName = node
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)})
	return p
}

// markUnschedulable is a scheduler's verdict on p, as it writes it.
func markUnschedulable(p *corev1.Pod, msg string) *corev1.Pod {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
	return p
}

// Binds of one decision landing seconds apart on a saturated API server
// are in flight, not a partial placement, however long the whole takes.
func TestBindsInFlightAreNotPartialPlacement(t *testing.T) {
	r := withPodGroups(newTestRecorder(), "g")
	r.Expect("g", 3, t0)
	for i, uid := range []string{"a", "b", "c"} {
		r.event(pod("g", strconv.Itoa(i), uid, "", i+1), added, at(0))
	}
	// Each bind 0.8 s after the last (stall limit 1 s): 1.6 s partly bound.
	for i, uid := range []string{"a", "b", "c"} {
		r.event(pod("g", strconv.Itoa(i), uid, "n", 10+i), updated, at(time.Duration(i)*800*time.Millisecond))
	}
	if v, p := r.judge(at(10 * time.Second)); len(v) != 0 || len(p) != 0 {
		t.Fatalf("violations %v, pending %v; want none for binds in flight", v, p)
	}
	if d := r.LongestPartial(at(time.Minute)); d != 1600*time.Millisecond {
		t.Errorf("longest partial binding %s, want 1.6s", d)
	}
}

// A member the scheduler marks unschedulable after the gang's first bind
// was left out of the placement: caught at once, no grace. A mark written
// before the first bind (an earlier session's) is not.
func TestUnschedulableAfterFirstBindIsPartialPlacement(t *testing.T) {
	r := withPodGroups(newTestRecorder(), "g", "h")
	r.Expect("g", 2, t0)
	r.event(pod("g", "0", "a", "", 1), added, at(0))
	r.event(markUnschedulable(pod("g", "1", "b", "", 2), "0/4 nodes are available"), added, at(0))
	r.event(pod("g", "0", "a", "n0", 3), updated, at(0))
	if v, p := r.judge(at(100 * time.Millisecond)); len(v) != 0 || len(p) != 1 {
		t.Fatalf("a stale mark: violations %v, pending %v; want g pending", v, p)
	}
	r.event(markUnschedulable(pod("g", "1", "b", "", 4), "1/2 tasks in gang unschedulable"), updated, at(200*time.Millisecond))
	wantViolation(t, violations(r, at(200*time.Millisecond)), "g", "marked unschedulable")

	r.Expect("h", 2, t0)
	r.event(markUnschedulable(pod("h", "0", "c", "", 5), "0/4 nodes are available"), added, at(0))
	r.event(markUnschedulable(pod("h", "1", "d", "", 6), "0/4 nodes are available"), added, at(0))
	r.event(bind(pod("h", "0", "c", "n0", 7), "n0", t0), updated, at(0))
	r.event(bind(pod("h", "1", "d", "n1", 8), "n1", t0), updated, at(0))
	if v := violations(r, at(time.Minute)); len(v) != 1 || v[0].Cluster != "g" {
		t.Errorf("violations %v, want g's only", v)
	}
}

// Milestones are the watch receipt capped at a second past the server's
// time for them: a watch that lags does not stretch the phases, and the
// lag is kept as the cross-check.
func TestMilestonesAreServerBounded(t *testing.T) {
	r := newTestRecorder()
	created := t0.Add(10 * time.Second) // the server's seconds
	gc := gpuCluster("g", 1, 1, gpulabv1alpha1.ClusterPending)
	gc.CreationTimestamp = metav1.NewTime(created)
	r.Expect("g", 2, t0) // the client's send time, before any throttling
	r.event(gc, added, created.Add(3*time.Second))
	pg := podGroup("g", 2)
	pg.CreationTimestamp = metav1.NewTime(created)
	r.event(pg, added, created.Add(300*time.Millisecond)) // within the second: the receipt
	a, b := pod("g", "0", "a", "", 3), pod("g", "1", "b", "", 4)
	a.CreationTimestamp, b.CreationTimestamp = metav1.NewTime(created), metav1.NewTime(created.Add(time.Second))
	r.event(a, added, created.Add(400*time.Millisecond))
	r.event(b, added, created.Add(1500*time.Millisecond))
	r.event(bind(a.DeepCopy(), "n0", created.Add(2*time.Second)), updated, created.Add(2100*time.Millisecond))
	r.event(bind(b.DeepCopy(), "n1", created.Add(4*time.Second)), updated, created.Add(9*time.Second))
	tl := r.Timelines()["g"]
	for _, c := range []struct {
		name      string
		got, want time.Time
	}{
		{"created", tl.Created, created.Add(time.Second)},
		{"podgroup", tl.PodGroup, created.Add(300 * time.Millisecond)},
		{"pods created", tl.PodsCreated, created.Add(1500 * time.Millisecond)},
		{"all bound", tl.AllBound, created.Add(5 * time.Second)},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s at %s, want %s", c.name, c.got.Sub(created), c.want.Sub(created))
		}
	}
	if tl.WatchLag != 4*time.Second {
		t.Errorf("watch lag %s, want 4s (the bind's event 5s after its second began)", tl.WatchLag)
	}
	if tl.BindSpread != 2900*time.Millisecond {
		t.Errorf("bind spread %s, want 2.9s (2.1s to the 5s cap)", tl.BindSpread)
	}
}

// Kubernetes' own PodGroups count as the gang's PodGroup, and a pod joins
// by spec.schedulingGroup: created before it, the pod is caught.
func TestNativePodGroups(t *testing.T) {
	r := newRecorder(RecorderInput{PartialGrace: grace, BindStall: grace, NativeGangs: true})
	native := func(cluster string, rv int) *k8sschedulingv1beta1.PodGroup {
		return &k8sschedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: cluster + "-pg", ResourceVersion: strconv.Itoa(rv),
			OwnerReferences: ownedBy("GPUCluster", cluster)}}
	}
	member := func(cluster, index, uid string, rv int) *corev1.Pod {
		p := pod(cluster, index, uid, "", rv)
		delete(p.Annotations, schedulingv1beta1.KubeGroupNameAnnotationKey)
		name := cluster + "-pg"
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &name}
		return p
	}
	r.Expect("ok", 1, t0)
	r.event(native("ok", 1), added, at(0))
	r.event(member("ok", "0", "a", 2), added, at(0))
	r.Expect("early", 1, t0)
	r.event(member("early", "0", "b", 3), added, at(0))
	r.event(native("early", 4), added, at(0))
	wantViolation(t, violations(r, at(5*time.Second)), "early", "before its PodGroup")
	if tl := r.Timelines()["ok"]; tl.PodGroup.IsZero() {
		t.Error("the native PodGroup was not seen as the gang's")
	}
}

// withClaim names the pod's generated ResourceClaim in its status.
func withClaim(p *corev1.Pod, claim string) *corev1.Pod {
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpus"})
	if claim == "" { // not created yet
		return p
	}
	p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: "gpus", ResourceClaimName: &claim})
	return p
}

// resourceClaim is pod's claim, allocated or not.
func resourceClaim(name, pod string, allocated bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: ownedBy("Pod", pod)}}
	if allocated {
		c.Status.Allocation = &resourceapi.AllocationResult{}
	}
	return c
}

func TestClaimsAllocated(t *testing.T) {
	r := withPodGroups(newRecorder(RecorderInput{PartialGrace: grace, BindStall: grace, Claims: true}), "g")
	r.Expect("g", 3, t0)
	// A head that claims nothing; one worker's claim is seen allocated
	// before its pod names it, the other's pod names its claim only later.
	// Neither worker's claim alone is the gang's.
	head := pod("g", "0", "h", "", 1)
	head.Name, head.Labels[gpulabv1alpha1.GroupLabel] = "g-head", "head"
	r.event(head, added, at(0))
	r.event(resourceClaim("g-w-0-gpus-x", "g-w-0", true), added, at(1*time.Second))
	r.event(withClaim(pod("g", "0", "a", "", 1), "g-w-0-gpus-x"), added, at(2*time.Second))
	r.event(withClaim(pod("g", "1", "b", "", 2), ""), added, at(2*time.Second))
	if tl := r.Timelines()["g"]; !tl.ClaimsAllocated.IsZero() {
		t.Fatalf("claims allocated at %v before a worker's claim exists", tl.ClaimsAllocated)
	}
	r.event(withClaim(pod("g", "1", "b", "", 3), "g-w-1-gpus-y"), updated, at(2*time.Second))
	r.event(resourceClaim("g-w-1-gpus-y", "g-w-1", false), added, at(2*time.Second))
	if tl := r.Timelines()["g"]; !tl.ClaimsAllocated.IsZero() {
		t.Fatalf("claims allocated at %v with one claim unallocated", tl.ClaimsAllocated)
	}
	r.event(resourceClaim("g-w-1-gpus-y", "g-w-1", true), updated, at(3*time.Second))
	r.event(resourceClaim("g-w-1-gpus-y", "g-w-1", true), updated, at(4*time.Second)) // a later update
	if tl := r.Timelines()["g"]; !tl.ClaimsAllocated.Equal(at(3 * time.Second)) {
		t.Errorf("claims allocated at %v, want the second claim's first allocated receipt %v", tl.ClaimsAllocated, at(3*time.Second))
	}
}

// Claims created is the last claim's creation, proven from its
// creationTimestamp: not before the gang's claiming pods all name theirs.
func TestClaimsCreated(t *testing.T) {
	r := withPodGroups(newRecorder(RecorderInput{PartialGrace: grace, BindStall: grace, Claims: true}), "g")
	r.Expect("g", 2, t0)
	created := func(name, pod string, server time.Time) *resourceapi.ResourceClaim {
		c := resourceClaim(name, pod, false)
		c.CreationTimestamp = metav1.Time{Time: server}
		return c
	}
	r.event(created("g-w-0-gpus-x", "g-w-0", at(time.Second)), added, at(1500*time.Millisecond))
	r.event(withClaim(pod("g", "0", "a", "", 1), "g-w-0-gpus-x"), added, at(2*time.Second))
	r.event(withClaim(pod("g", "1", "b", "", 2), ""), added, at(2*time.Second))
	if tl := r.Timelines()["g"]; !tl.ClaimsCreated.IsZero() {
		t.Fatalf("claims created at %v before the second pod's claim exists", tl.ClaimsCreated)
	}
	// Received 4 s after its creationTimestamp: proven by a second after it.
	r.event(created("g-w-1-gpus-y", "g-w-1", at(3*time.Second)), added, at(7*time.Second))
	r.event(withClaim(pod("g", "1", "b", "", 3), "g-w-1-gpus-y"), updated, at(7*time.Second))
	if tl := r.Timelines()["g"]; !tl.ClaimsCreated.Equal(at(4 * time.Second)) {
		t.Errorf("claims created at %v, want the last claim's creation proven by %v", tl.ClaimsCreated, at(4*time.Second))
	}
}
