package measure

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Fixture GPUs (testdata/dcgm).
const (
	h100 = "GPU-8f6b2c1e-3a4d-5e6f-7a8b-9c0d1e2f3a4b" // gpu-node-1, gpu 0, fresh
	a100 = "GPU-a810a1fc-9f46-0e6f-5cef-bf34c2248e12" // gpu-node-1, gpu 1, MIG instances 1 and 2, fresh
	gpuC = "GPU-604c7a18-e7d0-02e0-723a-7578be840651" // gpu-node-1, gpu 2, utilization 45s old on a 15s target
	gpuD = "GPU-213c841d-7181-629b-9a20-5c80fbd75ad9" // gpu-node-2, gpu 0, memory 300s old
)

var now = time.Unix(1700000000, 0)

// fresh is a sample read now, taken now.
func fresh(metric, uuid string) GPUSample {
	return GPUSample{Metric: metric, UUID: uuid, At: now, QueriedAt: now, Interval: DefaultScrapeInterval}
}

func TestCheckGPUSeries(t *testing.T) {
	samples := []GPUSample{
		fresh("gpulab_gpu_utilization_ratio", "GPU-a"), fresh("gpulab_gpu_memory_used_bytes", "GPU-a"),
		fresh("gpulab_gpu_utilization_ratio", "GPU-b"),
		fresh("DCGM_FI_DEV_GPU_UTIL", "GPU-c"), fresh("DCGM_FI_DEV_FB_USED", "GPU-c"),
	}
	c := CheckGPUSeries(samples, []string{"GPU-a", "GPU-b", "GPU-c", "GPU-d"})
	if len(c.Failures) != 2 || !strings.Contains(c.Failures[0], "GPU-b") || !strings.Contains(c.Failures[1], "GPU-d") {
		t.Errorf("failures %q, want GPU-b (utilization only) and GPU-d (nothing)", c.Failures)
	}
	if strings.Join(c.Exporters, ",") != "gpulab-agent,dcgm-exporter" || c.Covered != 2 {
		t.Errorf("exporters %v, covered %d", c.Exporters, c.Covered)
	}
}

// A utilization series from one exporter and memory from the other is not
// one exporter's complete view.
func TestCheckGPUSeriesNeedsOneExporter(t *testing.T) {
	samples := []GPUSample{fresh("gpulab_gpu_utilization_ratio", "GPU-a"), fresh("DCGM_FI_DEV_FB_USED", "GPU-a")}
	if c := CheckGPUSeries(samples, []string{"GPU-a"}); len(c.Failures) != 1 {
		t.Errorf("failures %q, want GPU-a", c.Failures)
	}
}

// TestCheckGPUSeriesFreshness: a series that exists is not enough; its
// newest sample must be within two scrape intervals of the query, and the
// failure names the stale series.
func TestCheckGPUSeriesFreshness(t *testing.T) {
	for _, tc := range []struct {
		age   time.Duration
		stale bool
	}{{0, false}, {2 * DefaultScrapeInterval, false}, {2*DefaultScrapeInterval + time.Second, true}, {10 * time.Minute, true}} {
		mem := fresh("DCGM_FI_DEV_FB_USED", "GPU-a")
		mem.At, mem.Node, mem.Index = now.Add(-tc.age), "node-1", "3"
		c := CheckGPUSeries([]GPUSample{fresh("DCGM_FI_DEV_GPU_UTIL", "GPU-a"), mem}, []string{"GPU-a"})
		if !tc.stale {
			if len(c.Failures) != 0 || c.Covered != 1 {
				t.Errorf("memory %s old: failures %q, want none", tc.age, c.Failures)
			}
			continue
		}
		want := fmt.Sprintf(`stale: DCGM_FI_DEV_FB_USED{UUID="GPU-a",Hostname="node-1",gpu="3"} last sampled %s before the query (limit 1m0s`, tc.age)
		if len(c.Failures) != 1 || !strings.Contains(c.Failures[0], want) || c.Covered != 0 {
			t.Errorf("memory %s old: failures %q, want one containing %q", tc.age, c.Failures, want)
		}
	}
}

// fixtureProm serves testdata/dcgm's answers: the query for each metric,
// an empty vector for gpulab's agent's, and the target list unless
// targets is false. It records the queries.
func fixtureProm(t *testing.T, targets bool) (*httptest.Server, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/targets" {
			if !targets {
				http.NotFound(w, r)
				return
			}
			http.ServeFile(w, r, "testdata/dcgm/api-targets.json")
			return
		}
		q := r.URL.Query().Get("query")
		mu.Lock()
		queries = append(queries, q)
		mu.Unlock()
		m := regexp.MustCompile(`timestamp\((\w+)\)`).FindStringSubmatch(q)
		if m == nil {
			http.Error(w, "unexpected query "+q, http.StatusBadRequest)
			return
		}
		if file := filepath.Join("testdata/dcgm", "api-query-"+m[1]+".json"); fileExists(file) {
			http.ServeFile(w, r, file)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &queries
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func fixtureSamples(t *testing.T, targets bool) []GPUSample {
	t.Helper()
	srv, _ := fixtureProm(t, targets)
	p, err := NewPrometheus(srv.URL+"/", "", "")
	if err != nil {
		t.Fatal(err)
	}
	samples, _, err := GPUSamplesInPrometheus(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

// TestGPUSamplesInPrometheus reads the fixture's answers: each sample's own
// timestamp (timestamp(), not the evaluation time), its MIG labels, and its
// target's scrape interval.
func TestGPUSamplesInPrometheus(t *testing.T) {
	srv, queries := fixtureProm(t, true)
	p, err := NewPrometheus(srv.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	samples, from, err := GPUSamplesInPrometheus(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(*queries) != 5 || (*queries)[0] != "max by ("+gpuSeriesLabels+") (timestamp(gpulab_gpu_utilization_ratio))" {
		t.Errorf("queries %q", *queries)
	}
	if !strings.Contains(from, "targets") {
		t.Errorf("intervals from %q, want Prometheus's targets", from)
	}
	if len(samples) != 11 {
		t.Fatalf("%d samples, want 11: %v", len(samples), samples)
	}
	var inst GPUSample
	for _, s := range samples {
		if s.UUID == a100 && s.Metric == "DCGM_FI_DEV_FB_USED" && s.MIGInstance == "2" {
			inst = s
		}
		if s.UUID == gpuD && s.Metric == "DCGM_FI_DEV_FB_USED" && (s.Age() != 300*time.Second || s.Interval != DefaultScrapeInterval) {
			t.Errorf("gpu-node-2's memory sample: age %s interval %s, want 5m0s and the default (its target is not listed)", s.Age(), s.Interval)
		}
	}
	if inst.MIGProfile != "3g.40gb" || inst.Node != "gpu-node-1" || inst.Index != "1" || inst.Interval != 15*time.Second ||
		!inst.QueriedAt.Equal(now) || inst.Age() != 5*time.Second {
		t.Errorf("MIG instance 2's memory sample %+v", inst)
	}

	c := CheckGPUSeries(samples, []string{h100, a100, gpuC, gpuD})
	if c.Covered != 2 || len(c.Failures) != 2 {
		t.Fatalf("covered %d, failures %q; want the H100 and the MIG A100 covered, gpu 2 and gpu-node-2's stale", c.Covered, c.Failures)
	}
	if f := c.Failures[0]; !strings.Contains(f, gpuC) || !strings.Contains(f, `stale: DCGM_FI_DEV_GPU_UTIL{UUID="`+gpuC+`",Hostname="gpu-node-1",gpu="2"} last sampled 45s before the query (limit 30s, 2 × 15s scrape interval)`) {
		t.Errorf("gpu 2: %q, want its utilization stale on its 15s target", f)
	}
	// gpu-node-2's utilization is as old, but its target is not listed:
	// the default 30s makes it fresh, and only its memory is stale.
	if f := c.Failures[1]; !strings.Contains(f, gpuD) || !strings.Contains(f, "DCGM_FI_DEV_FB_USED{") || strings.Contains(f, "DCGM_FI_DEV_GPU_UTIL{") {
		t.Errorf("gpu-node-2: %q, want only its memory series named stale", f)
	}
	if len(c.MIG) != 1 || c.MIGInstances != 2 || !strings.Contains(c.MIG[0], a100+" on gpu-node-1 (gpu 1): 2 MIG instances: GPU_I_ID 1 (3g.40gb), GPU_I_ID 2 (3g.40gb)") {
		t.Errorf("MIG %q (%d instances)", c.MIG, c.MIGInstances)
	}
}

// Without a target list (Thanos, Mimir) every series gets the default
// interval: gpu 2's 45s-old utilization is then fresh.
func TestGPUSamplesInPrometheusDefaultInterval(t *testing.T) {
	srv, _ := fixtureProm(t, false)
	p, err := NewPrometheus(srv.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	samples, from, err := GPUSamplesInPrometheus(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(from, "default 30s") {
		t.Errorf("intervals from %q, want the default", from)
	}
	if c := CheckGPUSeries(samples, []string{gpuC}); len(c.Failures) != 0 {
		t.Errorf("failures %q, want gpu 2 fresh within 2 × 30s", c.Failures)
	}
}

func TestGPUSamplesInPrometheusErrors(t *testing.T) {
	for name, body := range map[string]string{
		"error status": `{"status":"error","errorType":"bad_data","error":"parse error"}`,
		"not the API":  `<html>login</html>`,
		"matrix":       `{"status":"success","data":{"resultType":"matrix","result":[]}}`,
		"bad sample":   `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"UUID":"GPU-a"},"value":[1700000000,"soon"]}]}}`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
		p, err := NewPrometheus(srv.URL, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := GPUSamplesInPrometheus(context.Background(), p); err == nil {
			t.Errorf("%s: no error", name)
		}
		srv.Close()
	}
}

func readMIGFixture(t *testing.T) []GPUSample {
	t.Helper()
	page, err := os.ReadFile("testdata/dcgm/mig.metrics")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseScrape(page)
	if err != nil {
		t.Fatal(err)
	}
	return GPUSamplesInScrape(s, now)
}

// TestGPUSamplesInScrapeMIG parses DCGM's /metrics with a MIG GPU: its
// per-instance series carry the parent UUID plus GPU_I_ID, and cover it
// with DCGM_FI_PROF_GR_ENGINE_ACTIVE for utilization (DCGM has no
// DCGM_FI_DEV_GPU_UTIL for MIG instances).
func TestGPUSamplesInScrapeMIG(t *testing.T) {
	samples := readMIGFixture(t)
	if len(samples) != 7 {
		t.Fatalf("%d samples, want 7: %v", len(samples), samples)
	}
	instances := map[string]string{}
	for _, s := range samples {
		if s.UUID == a100 {
			if s.Node != "gpu-node-1" || s.Index != "1" || s.MIGInstance == "" {
				t.Errorf("A100 sample %+v, want gpu-node-1, gpu 1, a MIG instance", s)
			}
			instances[s.MIGInstance] = s.MIGProfile
		}
		if !s.Fresh() {
			t.Errorf("%s read from a scrape is not fresh", s)
		}
	}
	if fmt.Sprint(instances) != "map[1:3g.40gb 2:3g.40gb]" {
		t.Errorf("A100 instances %v", instances)
	}
	c := CheckGPUSeries(samples, []string{h100, a100})
	if len(c.Failures) != 0 || c.Covered != 2 || c.MIGInstances != 2 || len(c.MIG) != 1 || !strings.Contains(c.MIG[0], a100) {
		t.Errorf("coverage %+v, want both GPUs covered and the A100's 2 MIG instances reported", c)
	}
	// GR_ENGINE_ACTIVE stands in for utilization only on MIG instances.
	var noGR []GPUSample
	for _, s := range samples {
		if s.Metric != "DCGM_FI_PROF_GR_ENGINE_ACTIVE" || s.UUID != a100 {
			noGR = append(noGR, s)
		}
	}
	if c := CheckGPUSeries(noGR, []string{a100}); len(c.Failures) != 1 || !strings.Contains(c.Failures[0], "per MIG instance, DCGM_FI_PROF_GR_ENGINE_ACTIVE") {
		t.Errorf("the A100 without utilization: %q, want it uncovered", c.Failures)
	}
	whole := fresh("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "GPU-x")
	if c := CheckGPUSeries([]GPUSample{whole, fresh("DCGM_FI_DEV_FB_USED", "GPU-x")}, []string{"GPU-x"}); len(c.Failures) != 1 {
		t.Errorf("a whole GPU with GR_ENGINE_ACTIVE but no GPU_UTIL: %q, want it uncovered", c.Failures)
	}
}

// An exposition that carries its own timestamps is judged by them.
func TestGPUSamplesInScrapeTimestamp(t *testing.T) {
	old := now.Add(-5 * time.Minute).UnixMilli()
	page := fmt.Sprintf("DCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-a\"} 3 %d\nDCGM_FI_DEV_FB_USED{UUID=\"GPU-a\"} 7\n", old)
	s, err := ParseScrape([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if c := CheckGPUSeries(GPUSamplesInScrape(s, now), []string{"GPU-a"}); len(c.Failures) != 1 || !strings.Contains(c.Failures[0], "stale: DCGM_FI_DEV_GPU_UTIL") {
		t.Errorf("failures %q, want the utilization stale", c.Failures)
	}
}

// TestCheckNodeGPUSeries: on a cluster without GPUInventories each node's
// allocatable is the count; series with its Hostname, whole GPUs and MIG
// instances, must cover it, and be fresh.
func TestCheckNodeGPUSeries(t *testing.T) {
	scraped := readMIGFixture(t)
	// gpu-node-1 offers the H100 and the A100's two instances.
	if c := CheckNodeGPUSeries(scraped, map[string]int64{"gpu-node-1": 3}); len(c.Failures) != 0 || c.Covered != 2 || c.MIGInstances != 2 {
		t.Errorf("gpu-node-1 with 3 devices: %+v, want covered", c)
	}
	c := CheckNodeGPUSeries(scraped, map[string]int64{"gpu-node-1": 4, "gpu-node-9": 8})
	if len(c.Failures) != 2 || !strings.Contains(c.Failures[0], "node gpu-node-1 advertises 4 GPUs") || !strings.Contains(c.Failures[0], "cover 3 (2 GPUs have series)") ||
		!strings.Contains(c.Failures[1], "node gpu-node-9 advertises 8 GPUs") || !strings.Contains(c.Failures[1], "cover 0") {
		t.Errorf("failures %q, want gpu-node-1 one short and gpu-node-9 uncovered", c.Failures)
	}

	// Through Prometheus: gpu 2 on gpu-node-1 and gpu-node-2's GPU are
	// stale, and named.
	c = CheckNodeGPUSeries(fixtureSamples(t, true), map[string]int64{"gpu-node-1": 4, "gpu-node-2": 1})
	if len(c.Failures) != 4 || !strings.Contains(c.Failures[0], gpuC) || !strings.Contains(c.Failures[1], "gpu-node-1 advertises 4") ||
		!strings.Contains(c.Failures[2], gpuD) || !strings.Contains(c.Failures[3], "gpu-node-2 advertises 1") {
		t.Errorf("failures %q", c.Failures)
	}
	// A node outside the selection is not checked.
	if c := CheckNodeGPUSeries(fixtureSamples(t, true), map[string]int64{}); len(c.Failures) != 0 || c.Covered != 0 {
		t.Errorf("no nodes: %+v", c)
	}
}

func TestAdvertisedGPUs(t *testing.T) {
	n := corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		"nvidia.com/gpu":           resource.MustParse("2"),
		"nvidia.com/mig-1g.10gb":   resource.MustParse("7"),
		"nvidia.com/mig-3g.40gb":   resource.MustParse("2"),
		corev1.ResourceCPU:         resource.MustParse("64"),
		"example.com/gpu-like-res": resource.MustParse("5"),
	}}}
	if got := AdvertisedGPUs(n); got != 11 {
		t.Errorf("AdvertisedGPUs = %d, want 2 GPUs + 9 MIG instances", got)
	}
}
