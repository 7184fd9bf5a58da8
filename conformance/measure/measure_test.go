package measure

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

func pod(cluster, index, uid, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cluster + "-w-" + index, UID: types.UID(uid), Labels: map[string]string{
			gpulabv1alpha1.ClusterLabel: cluster, gpulabv1alpha1.GroupLabel: "w", gpulabv1alpha1.IndexLabel: index}},
		Spec: corev1.PodSpec{NodeName: node},
	}
}

func newTestRecorder(grace time.Duration) *Recorder {
	return &Recorder{in: RecorderInput{PartialGrace: grace}, clusters: map[string]*Timeline{}, live: map[string]string{}}
}

func TestPartialBindingDetector(t *testing.T) {
	r := newTestRecorder(50 * time.Millisecond)
	r.Expect("g", 2, time.Now())
	r.observe(pod("g", "0", "a", ""), false)
	r.observe(pod("g", "1", "b", ""), false)
	r.observe(pod("g", "0", "a", "n0"), false) // binder binds the first pod...
	r.observe(pod("g", "1", "b", "n1"), false) // ...and the second at once
	if v := r.Violations(); len(v) != 0 {
		t.Fatalf("an all-or-nothing bind was reported: %v", v)
	}
	r.Expect("h", 2, time.Now())
	r.observe(pod("h", "0", "c", "n0"), false) // one pod bound, the other never
	deadline := time.Now().Add(5 * time.Second)
	for len(r.Violations()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	v := r.Violations()
	if len(v) != 1 || v[0].Cluster != "h" || !strings.Contains(v[0].What, "partly bound") {
		t.Fatalf("violations %v, want gang h partly bound", v)
	}
	tl := r.Timelines()["g"]
	if tl.PodsCreated.IsZero() || tl.AllBound.IsZero() || tl.AllBound.Before(tl.PodsCreated) {
		t.Errorf("timeline %+v", tl)
	}
}

func TestDuplicatePodDetector(t *testing.T) {
	r := newTestRecorder(time.Second)
	r.Expect("d", 1, time.Now())
	r.observe(pod("d", "0", "a", ""), false)
	// A replacement after the old pod is gone is fine.
	r.observe(pod("d", "0", "a", ""), true)
	r.observe(pod("d", "0", "b", ""), false)
	if v := r.Violations(); len(v) != 0 {
		t.Fatalf("a replacement was reported: %v", v)
	}
	// A second live pod in the same slot (even under another name) is not.
	dup := pod("d", "0", "c", "")
	dup.Name = "d-w-0-copy"
	r.observe(dup, false)
	if v := r.Violations(); len(v) != 1 || !strings.Contains(v[0].What, "duplicate pod for d/w/0") {
		t.Fatalf("violations %v, want a duplicate", v)
	}
}

func TestHistogramQuantileDelta(t *testing.T) {
	hist := func(counts ...uint64) Scrape {
		bounds := []float64{0.1, 1, 10}
		var buckets []*dto.Bucket
		for i, b := range bounds {
			buckets = append(buckets, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(counts[i])})
		}
		return Scrape{"h": &dto.MetricFamily{Name: proto.String("h"), Metric: []*dto.Metric{{Histogram: &dto.Histogram{Bucket: buckets}}}}}
	}
	before := hist(10, 10, 10)
	after := hist(10, 60, 110) // the run added 50 in (0.1,1] and 50 in (1,10]
	if got := HistogramQuantileDelta(before, after, "h", nil, 0.5); got < 0.99 || got > 1.01 {
		t.Errorf("p50 = %v, want 1", got)
	}
	if got := HistogramQuantileDelta(before, after, "h", nil, 0.99); got < 9.7 || got > 9.9 {
		t.Errorf("p99 = %v, want ~9.82", got)
	}
}

func TestPodsBeforePodGroupDetector(t *testing.T) {
	r := newTestRecorder(time.Second)
	r.Expect("early", 1, time.Now())
	p := pod("early", "0", "a", "")
	p.ResourceVersion = "100"
	r.added(p)
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "early-pg", ResourceVersion: "101", Labels: map[string]string{gpulabv1alpha1.ClusterLabel: "early"}}}
	r.added(pg)
	r.Expect("ok", 1, time.Now())
	pg2 := pg.DeepCopy()
	pg2.Labels[gpulabv1alpha1.ClusterLabel], pg2.ResourceVersion = "ok", "200"
	r.added(pg2)
	p2 := pod("ok", "0", "b", "")
	p2.ResourceVersion = "201"
	r.added(p2)
	v := r.Violations()
	if len(v) != 1 || v[0].Cluster != "early" || !strings.Contains(v[0].What, "before its PodGroup") {
		t.Fatalf("violations %v, want only early's pod before its PodGroup", v)
	}
}
