package benchscale

import (
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/results"
)

func point(n int, ready99, rss float64) Point {
	return Point{N: n, Nodes: n + n/4 + 3, CPUSeconds: map[string]float64{"gpulab-operator": 2.5, "kube-apiserver": 9},
		Results: &results.Results{SchemaVersion: results.SchemaVersion, Verdict: results.VerdictPassed, Measurements: []results.Measurement{
			{Feature: "latency", Name: "create_to_status_ready", Unit: "seconds", Samples: n, P50: ready99 / 2, P99: ready99},
			results.Value("latency", "operator_rss_max", "bytes", rss),
			// Another feature's measurement of the same name is not ours.
			{Feature: "other", Name: "gangs_per_second", Samples: 1, P99: 999},
		}}}
}

func TestReportTableAndPlots(t *testing.T) {
	dir := t.TempDir()
	points := []Point{point(10, 1.5, 80<<20), point(100, 3.25, 120<<20)}
	if err := WriteReport(dir, points); err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 100 | 128 | PASSED |", " 3.25 |", " 120 |", "| 10 | 2.5 | 9.0 |", "![create → GPUCluster Ready](status-ready.svg)"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(string(report), "999") {
		t.Errorf("report.md took another feature's measurement:\n%s", report)
	}
	for _, pl := range plots {
		data, err := os.ReadFile(filepath.Join(dir, pl.file))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ XMLName xml.Name }
		if err := xml.Unmarshal(data, &doc); err != nil || doc.XMLName.Local != "svg" {
			t.Errorf("%s is not an SVG document: %v", pl.file, err)
		}
	}
	ready, _ := os.ReadFile(filepath.Join(dir, "status-ready.svg"))
	if n := strings.Count(string(ready), "<circle"); n != 4 {
		t.Errorf("status-ready.svg has %d points, want 4 (p50 and p99 at two scales)", n)
	}
	gangs, _ := os.ReadFile(filepath.Join(dir, "gangs-per-second.svg"))
	if strings.Contains(string(gangs), "<circle") {
		t.Error("gangs-per-second.svg plots points no run measured")
	}
}

func TestPlotLogAxis(t *testing.T) {
	svg := Plot("t", "x", "y", []Series{{Name: "a", Points: []XY{{10, 1}, {100, 2}, {1000, 4}}}})
	// Decades are evenly spaced: 10, 100 and 1000 at equal distances.
	for _, tick := range []string{">10<", ">100<", ">1000<"} {
		if !strings.Contains(svg, tick) {
			t.Errorf("no %s tick in\n%s", tick, svg)
		}
	}
	var xs []string
	for _, part := range strings.Split(svg, `<circle cx="`)[1:] {
		xs = append(xs, part[:strings.IndexByte(part, '"')])
	}
	if len(xs) != 3 {
		t.Fatalf("circles at %v", xs)
	}
	var x [3]float64
	for i := range xs {
		if _, err := fmt.Sscan(xs[i], &x[i]); err != nil {
			t.Fatal(err)
		}
	}
	if d1, d2 := x[1]-x[0], x[2]-x[1]; d1 <= 0 || math.Abs(d1-d2) > 0.2 {
		t.Errorf("decades not evenly spaced: x = %v", x)
	}
	if !strings.Contains(Plot("t", "x", "y", nil), "no data") {
		t.Error("an empty plot does not say so")
	}
}

func TestOptionsRejectBadInput(t *testing.T) {
	for _, o := range []Options{{Scales: []int{0}, Options: bench.Options{Suite: "s", Operator: "o", Out: "d"}}, {Options: bench.Options{Suite: "s"}}} {
		if err := o.defaults(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// The API server table is per gang, ordered by what the largest N served
// most, and shows "-" where a scale did not serve a kind.
func TestRequestTablePerGang(t *testing.T) {
	small, large := point(10, 1, 1), point(100, 1, 1)
	small.APIRequests = map[string]float64{"CREATE pods": 30, "watch events pods": 200}
	large.APIRequests = map[string]float64{"CREATE pods": 300, "watch events pods": 5000, "UPDATE pods/status": 900}
	table := requestTable([]Point{small, large})
	want := "| watch events pods | 20.0 | 50.0 |\n| UPDATE pods/status | - | 9.0 |\n| CREATE pods | 3.0 | 3.0 |\n"
	if !strings.Contains(table, want) {
		t.Errorf("request table lacks\n%s\ngot\n%s", want, table)
	}
	if got := requestTable([]Point{point(10, 1, 1)}); got != "" {
		t.Errorf("a run without API server counters rendered a table:\n%s", got)
	}
}

func TestRequestDelta(t *testing.T) {
	got := delta(map[string]float64{"GET pods": 5, "LIST nodes": 2}, map[string]float64{"GET pods": 9, "LIST nodes": 2, "CREATE pods": 3})
	if len(got) != 2 || got["GET pods"] != 4 || got["CREATE pods"] != 3 {
		t.Errorf("delta = %v, want GET pods 4 and CREATE pods 3, unmoved kinds left out", got)
	}
}

// Scales measured one at a time read back as one sorted report; a scale
// without its CPU, burst or API server files still renders, with those tables
// empty for it, and a directory with no scale is an error.
func TestReadPointsFromSavedScales(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []Point{point(300, 60, 1), point(10, 2, 1)} {
		sub := filepath.Join(dir, fmt.Sprintf("n-%d", p.N))
		if err := p.Results.Write(sub); err != nil {
			t.Fatal(err)
		}
		if p.N == 10 {
			if err := writeJSON(filepath.Join(sub, cpuSecondsFile), p.CPUSeconds); err != nil {
				t.Fatal(err)
			}
			if err := writeJSON(filepath.Join(sub, burstFile), bench.CPUWindow{Seconds: 3, MachineSeconds: 6}); err != nil {
				t.Fatal(err)
			}
		}
	}
	points, err := ReadPoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[0].N != 10 || points[1].N != 300 || points[1].Nodes != 378 ||
		points[0].CPUSeconds["kube-apiserver"] != 9 || points[1].CPUSeconds != nil ||
		points[0].Burst == nil || points[0].Burst.Seconds != 3 || points[1].Burst != nil {
		t.Errorf("read back %+v", points)
	}
	if _, err := ReadPoints(t.TempDir()); err == nil {
		t.Error("an empty directory read as a report")
	}
}

func TestLatencyWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := &results.Results{TimelineOrigins: map[string]time.Time{"latency": t0, "latency/overcommitted": t0.Add(time.Hour)},
		Timelines: []results.Timeline{
			{Feature: "latency", Start: 0, PodGroup: 0.1, PodsCreated: 0.2, AllBound: 1, PodsReady: 2, StatusReady: 3},
			// Never Ready: its last milestone ends the window.
			{Feature: "latency", Start: 1, PodGroup: 0.5, PodsCreated: 4, AllBound: -1, PodsReady: -1, StatusReady: -1},
			{Feature: "latency/overcommitted", Start: 0, StatusReady: 100},
		}}
	from, to, ok := latencyWindow(r)
	if !ok || !from.Equal(t0) || !to.Equal(t0.Add(5*time.Second)) {
		t.Errorf("window = %v to %v, %v; want 0 to 5 s", from, to, ok)
	}
	if _, _, ok := latencyWindow(&results.Results{}); ok {
		t.Error("a run without the latency feature's origin has a window")
	}
}

func TestBurstTable(t *testing.T) {
	p := point(100, 10, 1)
	p.Burst = &bench.CPUWindow{Seconds: 10, MachineSeconds: 20, Idle: 0.05, CPUSeconds: map[string]float64{"kube-apiserver": 11, "gpulab-operator": 1}}
	p.AtRest = &bench.CPUWindow{Seconds: 10, MachineSeconds: 20, Idle: 0.8, CPUSeconds: map[string]float64{"kube-apiserver": 3}}
	report := Markdown([]Point{point(10, 1, 1), p})
	for _, want := range []string{"| N gangs | window s | idle | busy CPU s/gang | gpulab-operator | kube-apiserver |",
		"| 100 | 10.0 | 5% | 0.19 | 5% | 55% |", "| 100, at rest | 10.0 | 80% | - | - | 15% |"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Count(report, "| 10 |") != 2 {
		t.Errorf("a point without a burst has a burst row:\n%s", report)
	}
}
