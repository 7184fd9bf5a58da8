package measure

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/bare"
)

// bareGang is gang g of a head and 2 workers as the suite creates it: the
// ConfigMap (revision 1) and its children.
func bareGang(t *testing.T) (*corev1.ConfigMap, *bare.Children) {
	t.Helper()
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	cm := bare.Object("g", map[string]string{"run": "r1"}, bare.Spec{Queue: "q", Head: tmpl,
		Groups: []bare.Group{{Name: "workers", Replicas: 2, Template: tmpl}}})
	cm.Namespace, cm.UID, cm.ResourceVersion = "ns", "uid-g", "1"
	cm.CreationTimestamp = metav1.NewTime(t0)
	ch, err := bare.ChildrenOf(cm)
	if err != nil {
		t.Fatal(err)
	}
	return cm, ch
}

// at revision rv, bound to node ("" for pending), Ready since readyAt
// (zero for not Ready).
func barePod(p *corev1.Pod, rv int, node string, readyAt time.Time) *corev1.Pod {
	p = p.DeepCopy()
	p.UID, p.ResourceVersion, p.CreationTimestamp = types.UID("uid-"+p.Name), strconv.Itoa(rv), metav1.NewTime(t0)
	p.Spec.NodeName = node
	if !readyAt.IsZero() {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readyAt)}}
	}
	return p
}

// withStatus is the gang's ConfigMap at revision rv with the floor's
// status write, made at written.
func withStatus(cm *corev1.ConfigMap, rv int, written time.Time) *corev1.ConfigMap {
	cm = cm.DeepCopy()
	cm.ResourceVersion = strconv.Itoa(rv)
	cm.Data[bare.StatusKey], cm.Data[bare.ReadyTimeKey] = bare.StatusReady, written.UTC().Format(time.RFC3339)
	return cm
}

// A bare gang's status is the floor's one write on its ConfigMap: the
// recorder follows the children to Ready, and StatusReady is when that
// write was seen (bounded by the time written in it, as gpulab's by its
// condition's), not when the pods were all Ready.
func TestRecorderFollowsBareGangToReady(t *testing.T) {
	r := newRecorder(RecorderInput{PartialGrace: grace, BindStall: grace, Workload: BareGangs{}})
	cm, ch := bareGang(t)
	r.event(cm, added, at(0))
	pg := ch.PodGroup.DeepCopy()
	pg.ResourceVersion, pg.CreationTimestamp = "2", metav1.NewTime(t0)
	r.event(pg, added, at(100*time.Millisecond))
	for i, p := range ch.Pods {
		r.event(barePod(p, 3+i, "", time.Time{}), added, at(200*time.Millisecond))
	}
	for i, p := range ch.Pods {
		r.event(barePod(p, 6+i, "n"+strconv.Itoa(i), time.Time{}), updated, at(300*time.Millisecond))
	}
	for i, p := range ch.Pods[:2] {
		r.event(barePod(p, 9+i, "n"+strconv.Itoa(i), t0.Add(time.Second)), updated, at(time.Second))
	}
	tl := r.Timelines()["g"]
	if tl.Desired != 3 || tl.PodGroup.IsZero() || tl.PodsCreated.IsZero() || tl.AllBound.IsZero() {
		t.Fatalf("timeline %+v, want 3 desired, PodGroup, pods created and bound", tl)
	}
	if !tl.StatusReady.IsZero() || !tl.PodsReady.IsZero() {
		t.Fatalf("Ready with 2 of 3 pods Ready: %+v", tl)
	}
	r.event(barePod(ch.Pods[2], 11, "n2", t0.Add(2*time.Second)), updated, at(2*time.Second))
	if tl = r.Timelines()["g"]; tl.PodsReady.IsZero() || !tl.StatusReady.IsZero() {
		t.Fatalf("pods Ready at %v, status Ready at %v: want no status Ready before the floor writes it", tl.PodsReady, tl.StatusReady)
	}
	// The floor writes at 2.4 s (the time written in it truncates to
	// 2 s); the recorder sees the write at 2.5 s.
	r.event(withStatus(cm, 12, at(2400*time.Millisecond)), updated, at(2500*time.Millisecond))
	if tl = r.Timelines()["g"]; !tl.StatusReady.Equal(at(2500 * time.Millisecond)) {
		t.Errorf("status Ready at %v, want the write's receipt %v", tl.StatusReady, at(2500*time.Millisecond))
	}
	if v, p := r.judge(at(time.Minute)); len(v) != 0 || len(p) != 0 {
		t.Errorf("violations %v, pending %v", v, p)
	}
}

// The floor's status is a claim held to the pods, as gpulab's: written
// before every pod was Ready, it is a violation.
func TestBareStatusBeforePodsReadyIsCaught(t *testing.T) {
	r := newRecorder(RecorderInput{PartialGrace: grace, BindStall: grace, Workload: BareGangs{}})
	cm, ch := bareGang(t)
	r.event(cm, added, at(0))
	pg := ch.PodGroup.DeepCopy()
	pg.ResourceVersion = "2"
	r.event(pg, added, at(0))
	for i, p := range ch.Pods {
		r.event(barePod(p, 3+i, "n"+strconv.Itoa(i), time.Time{}), added, at(0))
	}
	r.event(withStatus(cm, 6, at(time.Second)), updated, at(time.Second))
	for i, p := range ch.Pods {
		r.event(barePod(p, 7+i, "n"+strconv.Itoa(i), at(2*time.Second)), updated, at(2*time.Second))
	}
	wantViolation(t, violations(r, at(time.Minute)), "g", "ConfigMap g status claimed Ready (revision 6) before every pod was Ready")
}

// The clock starts at the gang object's creation, which the server
// recorded; when the suite issued the create is kept beside it.
func TestClockStartsAtTheCreation(t *testing.T) {
	r := newRecorder(RecorderInput{PartialGrace: grace, BindStall: grace, Workload: BareGangs{}})
	issued := t0.Add(-300 * time.Millisecond)
	r.Expect("g", 3, issued)
	if tl := r.Timelines()["g"]; !tl.Issued.Equal(issued) || !tl.Created.Equal(issued) {
		t.Fatalf("before the object is seen: issued %v, created %v; want both the issue", tl.Issued, tl.Created)
	}
	cm, _ := bareGang(t) // created at t0
	r.event(cm, added, at(200*time.Millisecond))
	if tl := r.Timelines()["g"]; !tl.Issued.Equal(issued) || !tl.Created.Equal(at(200*time.Millisecond)) {
		t.Errorf("issued %v, created %v; want the issue kept and the creation seen at %v", tl.Issued, tl.Created, at(200*time.Millisecond))
	}
}

// Another workload's status is its own: GPUClusters' StatusReady is not
// set from the pods.
func TestStatusReadyIsPodsReadyOnlyWithoutStatus(t *testing.T) {
	r := withPodGroups(newTestRecorder(), "g")
	r.event(gpuCluster("g", 1, 1, gpulabv1alpha1.ClusterProvisioning), added, at(0))
	r.event(ready(pod("g", "0", "a", "n0", 2)), added, at(0))
	r.event(ready(pod("g", "1", "b", "n1", 3)), added, at(0))
	if tl := r.Timelines()["g"]; tl.PodsReady.IsZero() || !tl.StatusReady.IsZero() {
		t.Errorf("GPUCluster timeline %+v: want pods Ready and no status Ready", tl)
	}
}

// The recorder watches only the bare gangs' ConfigMaps, and nothing but
// the workload's own type is narrowed for the others.
func TestBareGangWatchIsLabelled(t *testing.T) {
	by := watchedByObject(BareGangs{})
	if len(by) != 1 {
		t.Fatalf("by object %v, want the ConfigMaps only", by)
	}
	for obj, o := range by {
		if _, ok := obj.(*corev1.ConfigMap); !ok {
			t.Errorf("narrowed %T", obj)
		}
		cm, _ := bareGang(t)
		if !o.Label.Matches(labels.Set(cm.Labels)) {
			t.Error("a bare gang's ConfigMap is not watched")
		}
		if o.Label.Matches(labels.Set{"app": "other"}) {
			t.Error("an unrelated ConfigMap is watched")
		}
	}
	if watchedByObject(GPUClusters{}) != nil {
		t.Error("every GPUCluster is not watched")
	}
}

// Children map to their gang by owner kind ConfigMap, in group/index
// slots; a foreign object reads as nothing.
func TestBareGangsMapChildren(t *testing.T) {
	cm, ch := bareGang(t)
	w := BareGangs{}
	for _, p := range ch.Pods {
		if g := gangOf(p, w.Kind()); g != "g" {
			t.Errorf("pod %s in gang %q", p.Name, g)
		}
	}
	if g := gangOf(ch.PodGroup, w.Kind()); g != "g" {
		t.Errorf("PodGroup in gang %q", g)
	}
	if s := w.Slot("g", ch.Pods[2]); s != "g/workers/1" {
		t.Errorf("slot %q", s)
	}
	if st := w.Read(cm); st != (WorkloadState{Desired: 3}) {
		t.Errorf("read %+v, want 3 desired, not Ready or claiming before the floor's write", st)
	}
	written := at(1500 * time.Millisecond)
	if st := w.Read(withStatus(cm, 2, written)); st != (WorkloadState{Desired: 3, Ready: true, ReadyAt: written.Truncate(time.Second), Claim: true}) {
		t.Errorf("read %+v, want Ready since %v and claiming", st, written.Truncate(time.Second))
	}
	if w.Read(&corev1.Pod{}) != (WorkloadState{}) || w.Read(&corev1.ConfigMap{}) != (WorkloadState{}) {
		t.Error("a foreign object reads as a gang")
	}
}
