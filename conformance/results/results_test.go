package results

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func TestPercentile(t *testing.T) {
	samples := make([]float64, 100)
	for i := range samples {
		samples[i] = float64(i + 1)
	}
	for p, want := range map[float64]float64{50: 50, 90: 90, 99: 99, 100: 100, 1: 1} {
		if got := Percentile(samples, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if got := Percentile([]float64{3}, 99); got != 3 {
		t.Errorf("single sample p99 = %v", got)
	}
	m := Distribution("f", "x", "seconds", []float64{5, 1, 3})
	if m.P50 != 3 || m.Max != 5 || m.Samples != 3 {
		t.Errorf("distribution %+v", m)
	}
}

func TestRoundTripAndReports(t *testing.T) {
	r := &Results{
		SchemaVersion: SchemaVersion,
		StartTime:     time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC),
		EndTime:       time.Date(2026, 11, 29, 1, 5, 0, 0, time.UTC),
		Environment:   Environment{Profile: "local", KubernetesVersion: "v1.37.2", Nodes: 4, GPUsByProduct: map[string]int{"NVIDIA-H100-80GB-HBM3": 32}, Scale: 10},
		Features: []Feature{
			{Name: "gang", Seconds: 12, Assessments: []Assessment{{Name: "fits", Requirement: RequirementGangScheduling, Status: StatusPassed, Seconds: 12}}},
			{Name: "controller", Seconds: 30, Assessments: []Assessment{{Name: "valid", Requirement: RequirementRobustController, Status: StatusFailed,
				Reason: "duplicate pod c-workers-1", Messages: []string{"duplicate pod c-workers-1"}, Seconds: 30}}},
		},
		Measurements: []Measurement{Distribution("latency", "create_to_ready", "seconds", []float64{1, 2, 3})},
		Timelines:    []Timeline{{Feature: "latency", Cluster: "c0", Start: 0.1, PodGroup: 0.2, PodsCreated: 0.3, AllBound: 1.5, PodsReady: 2, StatusReady: 2.4}},
		// Nanoseconds survive the round trip: bench-scale lines CPU samples up with it.
		TimelineOrigins: map[string]time.Time{"latency": time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)},
	}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, back) {
		t.Errorf("round trip changed the results:\n%+v\n%+v", r, back)
	}
	if r.Passed() {
		t.Error("a run with a failed feature passed")
	}
	junit, _ := r.JUnit()
	var suite junitSuite
	if err := xml.Unmarshal(junit, &suite); err != nil {
		t.Fatal(err)
	}
	if suite.Tests != 2 || suite.Failures != 1 || suite.Cases[1].Failure.Message != "duplicate pod c-workers-1" {
		t.Errorf("junit %+v", suite)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(page), "<svg") || !strings.Contains(string(page), "latency/create_to_ready") || !strings.Contains(string(page), "duplicate pod c-workers-1") ||
		!strings.Contains(string(page), "latency: per-cluster timeline (1 clusters") {
		t.Errorf("report.html lacks the chart or the failure (%v)", err)
	}
	if r.Verdict != VerdictFailed || r.Features[1].Status != StatusFailed {
		t.Errorf("Write did not finalize: verdict %q, controller %q", r.Verdict, r.Features[1].Status)
	}
	if md := r.Markdown(); !strings.Contains(md, "FAILED") || !strings.Contains(md, "| latency/create_to_ready | seconds | 3 | 2 | 3 | max 3 (n<100) | 3 |") {
		t.Errorf("markdown:\n%s", md)
	}
}

// A run with no feature (its setup failed) did not pass.
func TestEmptyRunDidNotPass(t *testing.T) {
	r := &Results{SchemaVersion: SchemaVersion}
	if r.Passed() || !strings.Contains(r.Markdown(), "FAILED") {
		t.Errorf("a run with no feature passed:\n%s", r.Markdown())
	}
}

func TestCompare(t *testing.T) {
	base := &Results{Measurements: []Measurement{
		Value("latency", "ready_p99", "seconds", 2.0),
		Value("latency", "fast", "seconds", 0.002),
		Value("latency", "requests_per_cluster", "requests", 10),
		Value("latency", "gone", "seconds", 1),
	}}
	cur := &Results{Measurements: []Measurement{
		Value("latency", "ready_p99", "seconds", 2.5),              // +25%: regression
		Value("latency", "fast", "seconds", 0.004),                 // +100% but within noise
		Value("latency", "requests_per_cluster", "requests", 10.5), // +5%: fine
	}}
	c := Compare(base, cur, CompareOptions{MaxRegression: 0.10, NoiseSeconds: 0.05, NoiseCount: 0})
	byKey := map[string]Row{}
	for _, r := range c.Rows {
		byKey[r.Key] = r
	}
	if !byKey["latency/ready_p99"].Regressed || byKey["latency/fast"].Regressed || byKey["latency/requests_per_cluster"].Regressed || !byKey["latency/gone"].Missing {
		t.Errorf("rows %+v", c.Rows)
	}
	var out bytes.Buffer
	if !PrintComparison(&out, c) || !strings.Contains(out.String(), "REGRESSION") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestPushSendsEverySeries(t *testing.T) {
	var body, contentType string
	var raw []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ = io.ReadAll(req.Body)
		body, contentType = req.Method+" "+req.URL.Path+"\n"+string(raw), req.Header.Get("Content-Type")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	r := &Results{EndTime: time.Unix(1800000000, 0), Environment: Environment{Profile: "local"},
		Features: []Feature{{Name: "gang", Seconds: 3, Assessments: []Assessment{{Name: "a", Requirement: RequirementGangScheduling, Status: StatusPassed}}},
			{Name: "latency", Assessments: []Assessment{{Name: "b", Requirement: RequirementNone, Status: StatusSkipped, Reason: "no room"}}}},
		Measurements: []Measurement{Distribution("latency", "create_to_status_ready", "seconds", []float64{1, 2})}}
	if err := Push(context.Background(), srv.URL, r); err != nil {
		t.Fatal(err)
	}
	if got := pushGrouping(t, strings.SplitN(body, "\n", 2)[0]); !reflect.DeepEqual(got, map[string]string{"profile": "local", "cluster": "local", "workload": "gpucluster"}) {
		t.Errorf("grouping %v, want profile and cluster both local (no cluster name: the profile stands in), workload gpucluster", got)
	}
	for _, want := range []string{"PUT /metrics/job/gpulab_conformance/", "gpulab_conformance_feature_passed", "gpulab_conformance_measurement", "create_to_status_ready", "gpulab_conformance_passed",
		"gpulab_conformance_feature_duration_seconds", "gpulab_conformance_measurement_samples", "gpulab_conformance_last_run_timestamp_seconds"} {
		if !strings.Contains(body, want) {
			t.Errorf("push lacks %q", want)
		}
	}
	// The verdict is a labelled gauge: 1 for the run's, 0 for the others.
	series := decodePush(t, contentType, raw)
	for want, v := range map[string]float64{
		`gpulab_conformance_verdict{verdict="PARTIAL"}`:                                                               1,
		`gpulab_conformance_verdict{verdict="PASSED"}`:                                                                0,
		`gpulab_conformance_verdict{verdict="FAILED"}`:                                                                0,
		`gpulab_conformance_passed`:                                                                                   0,
		`gpulab_conformance_feature_passed{feature="gang"}`:                                                           1,
		`gpulab_conformance_feature_passed{feature="latency"}`:                                                        0,
		`gpulab_conformance_feature_status{feature="latency",status="partial"}`:                                       1,
		`gpulab_conformance_feature_status{feature="latency",status="passed"}`:                                        0,
		`gpulab_conformance_requirement_status{kar="KAR-0053",requirement="gang_scheduling",status="passed"}`:         1,
		`gpulab_conformance_requirement_status{kar="KAR-0059",requirement="accelerator_metrics",status="not_tested"}`: 1,
	} {
		got, ok := series[want]
		if !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", want, got, ok, v)
		}
	}
}

func TestMedianOfRuns(t *testing.T) {
	run := func(p99 float64, status Status) *Results {
		return &Results{SchemaVersion: SchemaVersion, Features: []Feature{{Name: "latency", Assessments: []Assessment{
			{Name: "a", Status: StatusPassed}, {Name: "b", Status: status, Reason: string(status) + " here", Messages: []string{string(status) + " here"}},
		}}}, Measurements: []Measurement{Value("latency", "ready", "seconds", p99)}}
	}
	m := Median([]*Results{run(1, StatusPassed), run(9, StatusPassed), run(2, StatusFailed)})
	if got := m.Measurements[0].P99; got != 2 {
		t.Errorf("median p99 = %v, want 2 (one outlier must not move it)", got)
	}
	if m.Features[0].Status != StatusFailed || m.Verdict != VerdictFailed || m.Features[0].Assessments[1].Reason != "failed here" {
		t.Errorf("a feature that failed in one run did not fail in the median: %+v", m.Features[0])
	}
	m = Median([]*Results{run(1, StatusSkipped), run(2, StatusPassed)})
	if m.Features[0].Status != StatusPartial || m.Verdict != VerdictPartial || len(m.Features[0].Assessments) != 2 {
		t.Errorf("a feature partial in one run is not partial in the median: %+v", m.Features[0])
	}
	early, late := run(1, StatusPassed), run(2, StatusPassed)
	early.StartTime, early.EndTime = time.Unix(100, 0), time.Unix(200, 0)
	late.StartTime, late.EndTime = time.Unix(300, 0), time.Unix(400, 0)
	m = Median([]*Results{late, early})
	if m.Verdict != VerdictPassed {
		t.Errorf("runs that all passed merge to %s", m.Verdict)
	}
	if !m.StartTime.Equal(early.StartTime) || !m.EndTime.Equal(late.EndTime) {
		t.Errorf("merged run spans %s to %s, want the first start and the last end", m.StartTime, m.EndTime)
	}
}

// decodePush reads pushed metric families back as "name{labels}" → value,
// labels sorted by name.
func decodePush(t *testing.T, contentType string, body []byte) map[string]float64 {
	t.Helper()
	dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.ResponseFormat(http.Header{"Content-Type": {contentType}}))
	out := map[string]float64{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("decoding the push: %v", err)
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := mf.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
}
