package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/poll/polltest"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

// recorder is a Publisher that keeps every state it is given. Load returns
// stored; annotate plays the clear-health annotation.
type recorder struct {
	mu      sync.Mutex
	states  []publisher.State
	stored  *v1alpha1.GPUInventoryStatus
	watcher func(string)
	done    []string
	// loadErrs is how many Loads fail before one succeeds.
	loadErrs int
}

func (r *recorder) Load(context.Context, string) (*v1alpha1.GPUInventoryStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loadErrs > 0 {
		r.loadErrs--
		return nil, errors.New("the API server is unreachable")
	}
	return r.stored.DeepCopy(), nil
}

func (r *recorder) WatchClearHealth(ctx context.Context, _ string, f func(string)) error {
	r.mu.Lock()
	r.watcher = f
	r.mu.Unlock()
	<-ctx.Done()
	return nil
}

func (r *recorder) ClearHealthDone(_ context.Context, _ string, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = append(r.done, value)
	return nil
}

// annotate delivers a clear-health annotation value once the agent watches.
func (r *recorder) annotate(t *testing.T, value string) {
	t.Helper()
	var f func(string)
	eventually(t, "the agent to watch for clear-health requests", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		f = r.watcher
		return f != nil
	})
	f(value)
}

func (r *recorder) cleared() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.done...)
}

func (r *recorder) Publish(_ context.Context, _ string, s publisher.State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
	return nil
}

func (r *recorder) all() []publisher.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]publisher.State(nil), r.states...)
}

// eventually waits for cond, failing the test after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, what, cond)
}

func startAgent(t *testing.T, profile string) (*mock.Backend, *Agent, *recorder, *metrics.Metrics) {
	t.Helper()
	return startAgentWith(t, profile, &recorder{})
}

// startAgentWith starts an agent publishing to rec (whose stored status is
// what an earlier run published).
func startAgentWith(t *testing.T, profile string, rec *recorder) (*mock.Backend, *Agent, *recorder, *metrics.Metrics) {
	t.Helper()
	b, err := mock.New(profile, "node-1", nvml.Options{EventWaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	// A long interval: every rescan in these tests is caused by an event.
	a, err := New(b, Options{NodeName: "node-1", Interval: time.Hour, Publisher: rec, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	eventually(t, "the first publish", func() bool { return len(rec.all()) == 1 })
	return b, a, rec, m
}

func TestXIDMarksExactlyThatGPU(t *testing.T) {
	b, _, rec, m := startAgent(t, "dgx-h100")
	first := rec.all()[0]
	if s := first.Status.Summary; s.Count != 8 || s.Healthy != 8 || first.Healthy != 8 {
		t.Fatalf("first publish: %+v", s)
	}
	if first.Labels[gfd.Product] != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("labels: %v", first.Labels)
	}

	// An application XID is counted but changes nothing.
	if err := b.InjectXID(2, 13); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ignored XID to be counted", func() bool {
		var out dto.Metric
		_ = m.HealthEvents.WithLabelValues("XID", "true").Write(&out)
		return out.GetCounter().GetValue() == 1
	})
	if n := len(rec.all()); n != 1 {
		t.Fatalf("an ignored XID caused %d publishes", n-1)
	}

	if err := b.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a publish after XID 79", func() bool { return len(rec.all()) == 2 })
	st := rec.all()[1]
	if st.Status.Summary.Healthy != 7 || st.Healthy != 7 {
		t.Errorf("healthy after XID 79: %d", st.Status.Summary.Healthy)
	}
	for i, g := range st.Status.GPUs {
		h := g.Health
		if i == 5 {
			if h.State != v1alpha1.GPUUnhealthy || h.Reason != "XidCriticalError" || h.LastXID == nil || *h.LastXID != 79 {
				t.Errorf("GPU 5: %+v", h)
			}
			continue
		}
		if h.State != v1alpha1.GPUHealthy {
			t.Errorf("GPU %d must stay healthy: %+v", i, h)
		}
	}
	want := map[string]float64{"2": 1, "5": 0, "0": 1}
	for gpu, healthy := range want {
		if got := gauge(t, m, "gpulab_gpu_healthy", gpu); got != healthy {
			t.Errorf("gpulab_gpu_healthy{gpu=%s} = %v, want %v", gpu, got, healthy)
		}
	}
	if got := gauge(t, m, "gpulab_gpu_last_xid", "5"); got != 79 {
		t.Errorf("gpulab_gpu_last_xid{gpu=5} = %v", got)
	}
	if got := gauge(t, m, "gpulab_gpu_last_xid", "2"); got != 13 {
		t.Errorf("gpulab_gpu_last_xid{gpu=2} = %v (ignored XIDs are still reported)", got)
	}
}

func TestLostGPUAndRescanStability(t *testing.T) {
	b, a, rec, _ := startAgent(t, "dgx-a100")
	a.Rescan()
	eventually(t, "the requested rescan", func() bool { return len(rec.all()) == 2 })
	s := rec.all()
	if !equality.Semantic.DeepEqual(s[0], s[1]) {
		t.Errorf("a rescan of an unchanged node must build the same state:\n%+v\n%+v", s[0], s[1])
	}
	if err := b.SetLost(4); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a publish after GPU 4 was lost", func() bool { return len(rec.all()) == 3 })
	g := rec.all()[2].Status.GPUs[4]
	if g.Health.State != v1alpha1.GPUUnhealthy || g.Health.Reason != "GPUIsLost" || len(g.Errors) == 0 {
		t.Errorf("GPU 4: %+v", g)
	}
}

// TestStickyHealthOutlivesRestart: an agent started on a node whose stored
// inventory has a sticky verdict publishes it again (the same GPU by UUID,
// also while NVML reports that GPU lost), and clears it only on request.
func TestStickyHealthOutlivesRestart(t *testing.T) {
	// The first run: XID 79 on GPU 5, then GPU 5 falls off the bus.
	b, _, first, _ := startAgent(t, "dgx-h100")
	if err := b.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a publish after XID 79", func() bool { return len(first.all()) == 2 })
	if err := b.SetLost(5); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a publish after GPU 5 was lost", func() bool { return len(first.all()) == 3 })
	lost := first.all()[2].Status
	if g := lost.GPUs[5]; g.UUID != b.UUID(5) || !g.Health.Sticky || g.Health.Reason != "XidCriticalError" {
		t.Fatalf("lost GPU 5 must keep its UUID and sticky verdict: %+v", g)
	}

	// The second run, after a reboot: GPU 5 answers again.
	rec := &recorder{stored: &lost}
	b2, a, rec, m := startAgentWith(t, "dgx-h100", rec)
	st := rec.all()[0].Status
	g := st.GPUs[5]
	if g.UUID != b2.UUID(5) || g.Health.State != v1alpha1.GPUUnhealthy || !g.Health.Sticky ||
		g.Health.Reason != "XidCriticalError" || g.Health.LastXID == nil || *g.Health.LastXID != 79 {
		t.Errorf("GPU 5 after the restart: %+v", g.Health)
	}
	if want := lost.GPUs[5].Health.Since; g.Health.Since == nil || !g.Health.Since.Equal(want) {
		t.Errorf("GPU 5 since %v, want the first run's %v", g.Health.Since, want)
	}
	if st.Summary.Healthy != 7 || rec.all()[0].Healthy != 7 {
		t.Errorf("healthy after the restart: %d", st.Summary.Healthy)
	}
	if got := gauge(t, m, "gpulab_gpu_healthy", "5"); got != 0 {
		t.Errorf("gpulab_gpu_healthy{gpu=5} = %v", got)
	}

	// Another GPU's UUID clears nothing; GPU 5's does, and only once the
	// cleared status is published is the annotation removed.
	rec.annotate(t, b2.UUID(4))
	eventually(t, "the request for GPU 4 to be served", func() bool { return len(rec.cleared()) == 1 })
	if h := rec.all()[len(rec.all())-1].Status.GPUs[5].Health; h.State != v1alpha1.GPUUnhealthy {
		t.Errorf("clearing GPU 4 changed GPU 5: %+v", h)
	}
	rec.annotate(t, "")
	rec.annotate(t, " "+b2.UUID(5)+", ")
	eventually(t, "the request for GPU 5 to be served", func() bool { return len(rec.cleared()) == 2 })
	last := rec.all()[len(rec.all())-1]
	if h := last.Status.GPUs[5].Health; h.State != v1alpha1.GPUHealthy || h.Sticky || last.Status.Summary.Healthy != 8 {
		t.Errorf("GPU 5 after the clear: %+v (healthy %d)", h, last.Status.Summary.Healthy)
	}
	if got := rec.cleared()[1]; got != " "+b2.UUID(5)+", " {
		t.Errorf("annotation removed for value %q", got)
	}

	// Seeing the served request again (the watch may) clears no newer XID.
	if err := b2.InjectXID(5, 48); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU 5 unhealthy again", func() bool {
		return rec.all()[len(rec.all())-1].Status.GPUs[5].Health.State == v1alpha1.GPUUnhealthy
	})
	rec.annotate(t, " "+b2.UUID(5)+", ")
	eventually(t, "the agent to take the request", func() bool { return len(a.clears) == 0 })
	n := len(rec.all())
	a.Rescan()
	eventually(t, "the rescan", func() bool { return len(rec.all()) > n })
	if h := rec.all()[len(rec.all())-1].Status.GPUs[5].Health; h.State != v1alpha1.GPUUnhealthy || len(rec.cleared()) != 2 {
		t.Errorf("the served request seen again cleared XID 48: %+v", h)
	}
	rec.annotate(t, "all")
	eventually(t, "the request for all to be served", func() bool { return len(rec.cleared()) == 3 })
	if h := rec.all()[len(rec.all())-1].Status.GPUs[5].Health; h.State != v1alpha1.GPUHealthy {
		t.Errorf("GPU 5 after clearing all: %+v", h)
	}
}

// TestFailedScansCountGPUsUnhealthy: a failed scan or two are tolerated
// (the last summary stands, Ready turns False); from the third in a row the
// node's GPUs are not Healthy (Unknown, the sticky verdict kept), the summary
// counts none healthy, Ready says why and the labels stay. A good scan
// recovers.
func TestFailedScansCountGPUsUnhealthy(t *testing.T) {
	b, a, rec, m := startAgent(t, "dgx-h100")
	if err := b.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a publish after XID 79", func() bool { return len(rec.all()) == 2 })
	good := rec.all()[1]

	b.FailDeviceCount(gonvml.ERROR_UNKNOWN)
	for n := 1; n <= 3; n++ {
		a.Rescan()
		eventually(t, "the publish of a failed scan", func() bool { return len(rec.all()) == 2+n })
		st := rec.all()[1+n]
		ready := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionFalse {
			t.Fatalf("after %d failed scans: Ready %+v, want False", n, ready)
		}
		if n < 3 && (st.Status.Summary.Healthy != 7 || st.Healthy != 7) {
			t.Errorf("after %d failed scans: healthy %d, want the last scan's 7", n, st.Status.Summary.Healthy)
		}
		if !equality.Semantic.DeepEqual(st.Labels, good.Labels) {
			t.Errorf("after %d failed scans: labels %v, want the last scan's %v", n, st.Labels, good.Labels)
		}
		// The last readings stand through a blip, not once the scans are
		// failing: a dashboard must not show them as current.
		if _, ok := lookupGauge(t, m, "gpulab_gpu_healthy", "0"); ok != (n < 3) {
			t.Errorf("after %d failed scans: per-GPU series exported %t, want %t", n, ok, n < 3)
		}
	}
	st := rec.all()[4]
	if s := st.Status.Summary; s.Healthy != 0 || st.Healthy != 0 || s.Count != 8 {
		t.Errorf("after 3 failed scans: summary %+v (healthy %d), want 8 GPUs, 0 healthy", s, st.Healthy)
	}
	if ready := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != "ScansFailing" {
		t.Errorf("after 3 failed scans: Ready %+v, want reason ScansFailing", ready)
	}
	for i, g := range st.Status.GPUs {
		h := g.Health
		switch {
		case i == 5 && (h.State != v1alpha1.GPUUnhealthy || !h.Sticky || h.Reason != "XidCriticalError"):
			t.Errorf("GPU 5 must keep its sticky verdict: %+v", h)
		case i != 5 && h.State != v1alpha1.GPUUnknown:
			t.Errorf("GPU %d after 3 failed scans: %+v, want Unknown", i, h)
		}
	}

	// A further failure changes nothing, so nothing is written again.
	a.Rescan()
	eventually(t, "the publish of a fourth failed scan", func() bool { return len(rec.all()) == 6 })
	if again := rec.all()[5]; !equality.Semantic.DeepEqual(again, st) {
		t.Errorf("a fourth failed scan changed the state:\n%+v\n%+v", st, again)
	}

	b.FailDeviceCount(gonvml.SUCCESS)
	a.Rescan()
	eventually(t, "the publish of a good scan", func() bool { return len(rec.all()) == 7 })
	st = rec.all()[6]
	if ready := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue ||
		st.Status.Summary.Healthy != 7 || st.Healthy != 7 {
		t.Errorf("after a good scan: Ready %+v, healthy %d, want True and 7", ready, st.Status.Summary.Healthy)
	}
	if got := gauge(t, m, "gpulab_gpu_healthy", "0"); got != 1 {
		t.Errorf("after a good scan: gpulab_gpu_healthy{gpu=0} %v, want 1", got)
	}
}

// TestFailedLoadServesNoStickyGPUHealthy: while the inventory published
// before cannot be read, its sticky verdicts are unknown, so no scan result
// offers GPU 5 (sick in the last run) as Healthy; once it is read, GPU 5
// is Unhealthy again.
func TestFailedLoadServesNoStickyGPUHealthy(t *testing.T) {
	b, _, first, _ := startAgent(t, "dgx-h100")
	if err := b.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a publish after XID 79", func() bool { return len(first.all()) == 2 })
	stored := first.all()[1].Status

	b2, err := mock.New("dgx-h100", "node-1", nvml.Options{EventWaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{stored: &stored, loadErrs: 1}
	var mu sync.Mutex
	var scanned []*Result
	a, err := New(b2, Options{NodeName: "node-1", Interval: time.Hour, Publisher: rec, OnScanned: func(r *Result) {
		mu.Lock()
		defer mu.Unlock()
		scanned = append(scanned, r)
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// The load is retried after a second.
	eventually(t, "the first publish", func() bool { return len(rec.all()) == 1 })
	mu.Lock()
	defer mu.Unlock()
	for n, r := range scanned {
		for _, g := range r.State.Status.GPUs {
			if g.UUID == b2.UUID(5) && g.Health.State == v1alpha1.GPUHealthy {
				t.Errorf("scan %d offered GPU 5, sick in the last run, as Healthy: %+v", n, g.Health)
			}
		}
	}
	if h := rec.all()[0].Status.GPUs[5].Health; h.State != v1alpha1.GPUUnhealthy || !h.Sticky {
		t.Errorf("GPU 5 once the inventory was read: %+v", h)
	}
	if last := scanned[len(scanned)-1]; last.State.Status.Summary.Healthy != 7 {
		t.Errorf("the last scan: %d healthy, want 7", last.State.Status.Summary.Healthy)
	}
}

func gauge(t *testing.T, m *metrics.Metrics, name, gpu string) float64 {
	t.Helper()
	v, ok := lookupGauge(t, m, name, gpu)
	if !ok {
		t.Fatalf("no %s{gpu=%q}", name, gpu)
	}
	return v
}

func lookupGauge(t *testing.T, m *metrics.Metrics, name, gpu string) (float64, bool) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.GPUs)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "gpu" && l.GetValue() == gpu {
					return mt.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func TestNoDriver(t *testing.T) {
	lib := nvml.NewReal(nvml.Options{})
	if err := lib.Init(); err == nil {
		_ = lib.Shutdown()
		t.Skip("this machine has an NVIDIA driver")
	}
	a, _ := New(nvml.NewReal(nvml.Options{}), Options{NodeName: "n"})
	if _, err := a.Inventory(); err == nil {
		t.Fatal("Inventory without a driver must fail")
	}
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("Run without a driver must fail")
	}

	rec := &recorder{}
	a, _ = New(nvml.NewReal(nvml.Options{}), Options{NodeName: "n", AllowNoGPU: true, Publisher: rec, Interval: time.Hour})
	inv, err := a.Inventory()
	if err != nil || len(inv.Status.GPUs) != 0 || inv.Name != "n" {
		t.Fatalf("Inventory with AllowNoGPU: %v %+v", err, inv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	eventually(t, "an empty inventory to be published", func() bool { return len(rec.all()) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := rec.all()[0]
	if st.Status.Summary.Count != 0 || len(st.Labels) != 0 || st.Status.Conditions[0].Reason != v1alpha1.ReasonScanSucceeded {
		t.Errorf("empty inventory: %+v", st)
	}
}

// BenchmarkScan is one full scan of a DGX H100 mock (8 GPUs): NVML reads,
// health, inventory status, labels and gauges.
func BenchmarkScan(b *testing.B) {
	be, err := mock.New("dgx-h100", "bench", nvml.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := be.Init(); err != nil {
		b.Fatal(err)
	}
	a, _ := New(be, Options{NodeName: "bench", Metrics: metrics.New(prometheus.NewRegistry(), metrics.Options{})})
	b.ReportAllocs()
	for b.Loop() {
		if r := a.scan(""); r.Snapshot == nil {
			b.Fatal("scan failed")
		}
	}
}
