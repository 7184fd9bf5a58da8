package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/podresources"
)

func gpus(t testing.TB, node string) ([]metrics.GPU, *nvml.Snapshot) {
	b, err := mock.New("dgx-h100", node, nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetTelemetry(3, mock.Telemetry{MemoryUsedMiB: 1024, GPUUtilizationPercent: 87, MemoryUtilizationPercent: 40,
		TemperatureCelsius: 61, PowerMilliwatts: 512250, ECCUncorrected: 2, SMClockMHz: 1980}); err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	s, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := make([]metrics.GPU, len(s.Devices))
	for i := range s.Devices {
		g[i] = metrics.GPU{Device: &s.Devices[i], Healthy: i != 3, LastXID: map[bool]uint64{true: 79}[i == 3]}
	}
	return g, s
}

func TestCollector(t *testing.T) {
	c := metrics.NewCollector(metrics.Options{Format: metrics.FormatGPULab})
	g, s := gpus(t, "node-1")
	c.Set("node-1", s.DriverVersion, g)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	series := gather(t, reg)
	if n := len(series["gpulab_gpu_info"]); n != 8 {
		t.Fatalf("gpulab_gpu_info: %d series, want 8", n)
	}
	wantLabels := map[string]string{"UUID": s.Devices[3].UUID, "device": "nvidia3", "gpu": "3", "hostname": "node-1",
		"modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:5D:00.0"}
	for name, want := range map[string]float64{
		"gpulab_gpu_power_usage_watts":            512.25,
		"gpulab_gpu_utilization_ratio":            0.87,
		"gpulab_gpu_memory_utilization_ratio":     0.40,
		"gpulab_gpu_memory_used_bytes":            1 << 30,
		"gpulab_gpu_memory_total_bytes":           81559 << 20,
		"gpulab_gpu_temperature_celsius":          61,
		"gpulab_gpu_ecc_uncorrected_errors_total": 2,
		"gpulab_gpu_uncorrectable_remapped_rows":  0,
		"gpulab_gpu_row_remap_failure":            0,
		"gpulab_gpu_healthy":                      0,
		"gpulab_gpu_last_xid":                     79,
		"gpulab_gpu_query_errors":                 0,
	} {
		m, ok := series[name]["3"]
		if !ok {
			t.Errorf("%s{gpu=3} missing", name)
			continue
		}
		if v := value(m); v != want {
			t.Errorf("%s{gpu=3} = %v, want %v", name, v, want)
		}
		for k, v := range wantLabels {
			if got := label(m, k); got != v {
				t.Errorf("%s{gpu=3}: label %s=%q, want %q", name, k, got, v)
			}
		}
	}
	if v := value(series["gpulab_gpu_healthy"]["0"]); v != 1 {
		t.Errorf("gpulab_gpu_healthy{gpu=0} = %v, want 1", v)
	}
	c.Delete("node-1")
	if n := len(gather(t, reg)); n != 0 {
		t.Errorf("a deleted node leaves %d metric families", n)
	}
}

// TestDCGM: the DCGM exporter's fields in its units, with its labels and the
// pod holding each GPU.
func TestDCGM(t *testing.T) {
	g, s := gpus(t, "node-1")
	train := podresources.Owner{Pod: "train-0", Namespace: "ml", Container: "trainer"}
	scrapes := 0
	c := metrics.NewCollector(metrics.Options{Format: metrics.FormatDCGM, Owners: func() map[string]podresources.Owner {
		scrapes++
		return map[string]podresources.Owner{s.Devices[3].UUID: train}
	}})
	c.Set("node-1", s.DriverVersion, g)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	series := gather(t, reg)
	if scrapes != 1 {
		t.Errorf("owners asked %d times in one scrape, want 1", scrapes)
	}
	for name := range series {
		if !strings.HasPrefix(name, "DCGM_FI_DEV_") {
			t.Errorf("--metrics-format=dcgm exports %s", name)
		}
	}
	type want struct {
		v       float64
		counter bool
	}
	for name, w := range map[string]want{
		"DCGM_FI_DEV_GPU_UTIL":                    {87, false},
		"DCGM_FI_DEV_MEM_COPY_UTIL":               {40, false},
		"DCGM_FI_DEV_FB_USED":                     {1024, false},
		"DCGM_FI_DEV_FB_FREE":                     {81559 - 1024, false},
		"DCGM_FI_DEV_GPU_TEMP":                    {61, false},
		"DCGM_FI_DEV_POWER_USAGE":                 {512.25, false},
		"DCGM_FI_DEV_SM_CLOCK":                    {1980, false},
		"DCGM_FI_DEV_XID_ERRORS":                  {79, false},
		"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":           {2, true},
		"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": {0, true},
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   {0, true},
		"DCGM_FI_DEV_ROW_REMAP_FAILURE":           {0, false},
	} {
		if n := len(series[name]); n != 8 {
			t.Errorf("%s: %d series, want 8", name, n)
		}
		m, ok := series[name]["3"]
		if !ok {
			t.Errorf("%s{gpu=3} missing", name)
			continue
		}
		if v := value(m); v != w.v || (m.GetCounter() != nil) != w.counter {
			t.Errorf("%s{gpu=3} = %v (counter %v), want %v (counter %v)", name, v, m.GetCounter() != nil, w.v, w.counter)
		}
		for k, v := range map[string]string{"gpu": "3", "UUID": s.Devices[3].UUID, "pci_bus_id": "00000000:5D:00.0", "device": "nvidia3",
			"modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-1", "DCGM_FI_DRIVER_VERSION": "570.172.08",
			"pod": "train-0", "namespace": "ml", "container": "trainer"} {
			if got := label(m, k); got != v {
				t.Errorf("%s{gpu=3}: label %s=%q, want %q", name, k, got, v)
			}
		}
		// A GPU no pod holds carries the labels, empty.
		if m0 := series[name]["0"]; m0 == nil || label(m0, "UUID") != s.Devices[0].UUID || !hasLabel(m0, "pod") ||
			label(m0, "pod") != "" || label(m0, "namespace") != "" || label(m0, "container") != "" {
			t.Errorf("%s{gpu=0}: %v, want empty pod labels", name, m0)
		}
	}
	if v := value(series["DCGM_FI_DEV_SM_CLOCK"]["0"]); v != 345 {
		t.Errorf("DCGM_FI_DEV_SM_CLOCK{gpu=0} = %v, want the idle H100's 345 MHz", v)
	}

	// The default exports both, each family once.
	both := metrics.NewCollector(metrics.Options{})
	both.Set("node-1", s.DriverVersion, g)
	reg = prometheus.NewPedanticRegistry()
	reg.MustRegister(both)
	series = gather(t, reg)
	for _, name := range []string{"gpulab_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL"} {
		if n := len(series[name]); n != 8 {
			t.Errorf("default format: %s has %d series, want 8", name, n)
		}
	}
	if _, err := metrics.ParseFormat("prometheus"); err == nil {
		t.Error("ParseFormat accepts prometheus")
	}
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return true
		}
	}
	return false
}

// gather returns series by metric name and gpu label.
func gather(t *testing.T, g prometheus.Gatherer) map[string]map[string]*dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]*dto.Metric{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]*dto.Metric{}
			}
			out[mf.GetName()][label(m, "gpu")] = m
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// BenchmarkScrape is one /metrics scrape of an agent with 8 GPUs, including
// the Go and process collectors the agent registers.
func BenchmarkScrape(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, metrics.Options{}) // both formats, as the agent's default
	g, s := gpus(b, "node-1")
	m.GPUs.Set("node-1", s.DriverVersion, g)
	m.ScanDuration.Observe(0.001)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
