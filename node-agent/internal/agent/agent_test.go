package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/labels"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

// recorder is a Publisher that keeps every state it is given.
type recorder struct {
	mu     sync.Mutex
	states []publisher.State
}

func (r *recorder) Load(context.Context, string) (*v1alpha1.GPUInventoryStatus, error) {
	return nil, nil
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

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startAgent(t *testing.T, profile string) (*mock.Backend, *Agent, *recorder, *metrics.Metrics) {
	t.Helper()
	b, err := mock.New(profile, "node-1", nvml.Options{EventWaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	m := metrics.New(prometheus.NewRegistry())
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
	if first.Labels[labels.Product] != "NVIDIA-H100-80GB-HBM3" {
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

func gauge(t *testing.T, m *metrics.Metrics, name, gpu string) float64 {
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
					return mt.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{gpu=%q}", name, gpu)
	return 0
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
	a, _ := New(be, Options{NodeName: "bench", Metrics: metrics.New(prometheus.NewRegistry())})
	b.ReportAllocs()
	for b.Loop() {
		if r := a.scan(""); r.Snapshot == nil {
			b.Fatal("scan failed")
		}
	}
}
