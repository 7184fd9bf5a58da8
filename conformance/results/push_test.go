package results

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// Two clusters of one profile, and two workloads on one cluster, must land
// in groups of their own, or a later push replaces the earlier series.
func TestPushGroupsByCluster(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		paths = append(paths, req.Method+" "+req.URL.Path)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	runs := []Environment{
		{Profile: "cluster", ClusterName: "lab-a"},
		{Profile: "cluster", ClusterName: "lab-b"},
		{Profile: "cluster", ClusterName: "lab-b", Workload: "raycluster"},
	}
	for _, env := range runs {
		r := &Results{Environment: env,
			Features:     []Feature{{Name: "gang", Assessments: []Assessment{{Name: "a", Status: StatusPassed}}}},
			Measurements: []Measurement{Value("latency", "ready", "seconds", 1)}}
		if err := Push(context.Background(), srv.URL, r); err != nil {
			t.Fatal(err)
		}
	}
	if len(paths) != len(runs) {
		t.Fatalf("pushes %v, want %d", paths, len(runs))
	}
	for i, env := range runs {
		got := pushGrouping(t, paths[i])
		if want := map[string]string{"profile": "cluster", "cluster": env.ClusterName, "workload": env.WorkloadName()}; !reflect.DeepEqual(got, want) {
			t.Errorf("push %d (%s) grouped by %v, want %v", i, paths[i], got, want)
		}
	}
}

func TestPushCluster(t *testing.T) {
	if got := PushCluster(Environment{Profile: "kind", ClusterName: "ci-1"}); got != "ci-1" {
		t.Errorf("PushCluster with a name = %q, want ci-1", got)
	}
	if got := PushCluster(Environment{Profile: "kind"}); got != "kind" {
		t.Errorf("PushCluster without a name = %q, want the profile", got)
	}
}

// pushGrouping reads the grouping labels out of a Pushgateway request line
// "PUT /metrics/job/<job>/<label>/<value>/...", checking the job. The
// client writes the labels in map order, so they come back as a map.
func pushGrouping(t *testing.T, line string) map[string]string {
	t.Helper()
	_, path, _ := strings.Cut(line, " ")
	parts := strings.Split(strings.TrimPrefix(path, "/metrics/"), "/")
	if len(parts) < 2 || len(parts)%2 != 0 || parts[0] != "job" || parts[1] != PushJob {
		t.Fatalf("push path %q, want /metrics/job/%s/<label>/<value>...", path, PushJob)
	}
	out := map[string]string{}
	for i := 2; i < len(parts); i += 2 {
		out[parts[i]] = parts[i+1]
	}
	return out
}

// The band is each quantile's lowest and highest value over the baseline
// runs; a run where a measurement has no samples does not widen it.
func TestBaselineBand(t *testing.T) {
	run := func(ms ...Measurement) *Results { return &Results{Measurements: ms} }
	ready := func(p50, p99 float64) Measurement {
		return Measurement{Feature: "latency", Name: "ready", Unit: "seconds", Samples: 100, P50: p50, P90: p50, P99: p99, Max: p99}
	}
	got := BaselineBand([]*Results{
		run(ready(2, 5)),
		run(ready(1, 7), Measurement{Feature: "latency", Name: "failover", Unit: "seconds"}),
		run(ready(3, 6)),
	})
	want := map[BandKey]Band{
		{"latency", "ready", "seconds", "0.5"}:  {1, 3},
		{"latency", "ready", "seconds", "0.9"}:  {1, 3},
		{"latency", "ready", "seconds", "0.99"}: {5, 7},
		{"latency", "ready", "seconds", "1"}:    {5, 7},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BaselineBand = %v, want %v", got, want)
	}
}

// With baseline runs, the push carries the band's two bounds for each
// quantile; without, no baseline series at all.
func TestPushBaselineBand(t *testing.T) {
	var pushes []map[string]float64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("reading the push: %v", err)
		}
		baseline := map[string]float64{}
		for k, v := range decodePush(t, req.Header.Get("Content-Type"), body) {
			if strings.HasPrefix(k, "gpulab_conformance_baseline{") {
				baseline[k] = v
			}
		}
		pushes = append(pushes, baseline)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	r := &Results{Environment: Environment{Profile: "local"}, Measurements: []Measurement{Value("latency", "ready", "seconds", 2)}}
	if err := Push(context.Background(), srv.URL, r); err != nil {
		t.Fatal(err)
	}
	if err := Push(context.Background(), srv.URL, r,
		&Results{Measurements: []Measurement{Value("latency", "ready", "seconds", 1.5)}},
		&Results{Measurements: []Measurement{Value("latency", "ready", "seconds", 2.5)}}); err != nil {
		t.Fatal(err)
	}
	if len(pushes) != 2 {
		t.Fatalf("%d pushes, want 2", len(pushes))
	}
	if len(pushes[0]) != 0 {
		t.Errorf("a push without baseline runs carries baseline series %v", pushes[0])
	}
	want := map[string]float64{}
	for _, q := range []string{"0.5", "0.9", "0.99", "1"} {
		series := func(bound string) string {
			return `gpulab_conformance_baseline{bound="` + bound + `",feature="latency",name="ready",quantile="` + q + `",unit="seconds"}`
		}
		want[series("low")], want[series("high")] = 1.5, 2.5
	}
	if !reflect.DeepEqual(pushes[1], want) {
		t.Errorf("baseline series %v, want %v", pushes[1], want)
	}
}
