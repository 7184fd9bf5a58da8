package results

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// perfRun is a local scale-10 run as the suite wrote it (numbers from a
// real results.json), plus what a run also holds: a phase never observed
// (no samples), a quantile with no data (NaN) and a skipped feature.
func perfRun() *Results {
	dist := func(feature, name, unit string, samples int, p50, p90, p99, max float64) Measurement {
		return Measurement{Feature: feature, Name: name, Unit: unit, Samples: samples, P50: p50, P90: p90, P99: p99, Max: max}
	}
	r := &Results{
		SchemaVersion: SchemaVersion,
		StartTime:     time.Date(2026, 11, 29, 11, 2, 10, 0, time.UTC),
		EndTime:       time.Date(2026, 11, 29, 12, 4, 58, 453474898, time.FixedZone("CET", 3600)),
		Environment: Environment{
			Profile: "local", KubernetesVersion: "v1.37.2", VolcanoVersion: "v1.10.0", Nodes: 15,
			GPUsByProduct:   map[string]int{"NVIDIA-H100-80GB-HBM3": 120},
			OperatorVersion: "gpulab-operator v0.3.0 (commit cd46c23d90d067d9fb0725c986d5d854cdea1453, built 2026-11-29T10:59:00Z, go1.26.8)",
			SuiteVersion:    "v0.3.0", SuiteCommit: "cd46c23d90d067d9fb0725c986d5d854cdea1453",
			ClusterName: "gpulab-conformance", Workload: "gpucluster", Scale: 10,
		},
		Features: []Feature{
			{Name: "controller", Assessments: []Assessment{{Name: "a valid GPUCluster reaches Ready", Status: StatusPassed}}},
			{Name: "gang", Assessments: []Assessment{{Name: "K gangs contending", Status: StatusPassed}}},
			{Name: "latency", Assessments: []Assessment{
				{Name: "clusters created at once reach Ready", Status: StatusPassed},
				{Name: "more gangs than capacity", Status: StatusSkipped, Reason: "the fleet has no room to overcommit"},
			}},
			{Name: "accelerators", Assessments: []Assessment{{Name: "utilization changes under load", Status: StatusSkipped, Reason: "no real GPUs"}}},
		},
		Measurements: []Measurement{
			Value("controller", "valid_create_to_ready", "seconds", 1.120526345),
			Value("controller", "leader_failover", "seconds", 17.617998477),
			dist("gang", "contended_free_to_ready", "seconds", 3, 1.090853043, 1.109609925, 1.109609925, 1.109609925),
			dist("latency", "create_to_all_bound", "seconds", 10, 1.239096259, 1.414619459, 1.424876913, 1.424876913),
			dist("latency", "create_to_status_ready", "seconds", 0, 0, 0, 0, 0),
			Value("latency", "clusters", "count", 10),
			Value("latency", "gangs_per_second", "gangs/s", 4.517457506051472),
			Value("latency", "queue_wait_p99", "seconds", math.NaN()),
			Value("latency", "reconcile_errors", "count", 0),
			Value("latency", "operator_rss_max", "bytes", 66977792),
			Value("latency", "gang_min_cpu", "millicores", 300),
			// The skipped assessment's distribution: nothing was measured.
			Distribution("latency", "overcommitted_create_to_all_bound", "seconds", nil),
			Distribution("accelerators", "utilization_change", "percent", nil),
		},
	}
	r.Finalize()
	return r
}

// cl2PerfData is perftype.PerfData as perfdash decodes it.
type cl2PerfData struct {
	Version   string `json:"version"`
	DataItems []struct {
		Data   map[string]float64 `json:"data"`
		Unit   string             `json:"unit"`
		Labels map[string]string  `json:"labels"`
	} `json:"dataItems"`
	Labels map[string]string `json:"labels"`
}

func TestWritePerfData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "perfdata")
	paths, err := perfRun().WritePerfData(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	// One file per feature with something measured, named for perfdash's
	// <OutputFilePrefix>_<Name> match; the end time in UTC, no colons.
	want := []string{
		"GpulabConformance_controller_gpucluster_20261129T110458Z.json",
		"GpulabConformance_gang_gpucluster_20261129T110458Z.json",
		"GpulabConformance_latency_gpucluster_20261129T110458Z.json",
	}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != len(want) {
		t.Fatalf("the directory holds %d entries (%v), want the %d files", len(entries), err, len(want))
	}

	latency := readPerfData(t, paths[2])
	if latency.Version != "v1" {
		t.Errorf("version %q, want v1", latency.Version)
	}
	items := map[string]int{}
	for i, item := range latency.DataItems {
		if len(item.Labels) != 1 || item.Labels["Metric"] == "" {
			t.Errorf("item %d labels %v, want only Metric", i, item.Labels)
		}
		if _, dup := items[item.Labels["Metric"]]; dup {
			t.Errorf("metric %s written twice", item.Labels["Metric"])
		}
		items[item.Labels["Metric"]] = i
		var buckets []string
		for b := range item.Data {
			buckets = append(buckets, b)
		}
		sort.Strings(buckets)
		if !reflect.DeepEqual(buckets, []string{"Max", "Perc50", "Perc90", "Perc99"}) {
			t.Errorf("%s buckets %v, want Perc50, Perc90, Perc99 and Max", item.Labels["Metric"], buckets)
		}
	}
	// Not measured is not zero: no samples and NaN are left out; a real 0 stays.
	for _, missing := range []string{"create_to_status_ready", "queue_wait_p99", "overcommitted_create_to_all_bound"} {
		if _, ok := items[missing]; ok {
			t.Errorf("%s has no value but was written: %v", missing, latency.DataItems[items[missing]])
		}
	}
	for _, tc := range []struct {
		metric, unit string
		want         map[string]float64
	}{
		{"create_to_all_bound", "ms", map[string]float64{"Perc50": 1239.096259, "Perc90": 1414.619459, "Perc99": 1424.876913, "Max": 1424.876913}},
		{"clusters", "count", map[string]float64{"Perc50": 10, "Perc90": 10, "Perc99": 10, "Max": 10}},
		{"gangs_per_second", "gangs/s", map[string]float64{"Perc50": 4.517458, "Perc90": 4.517458, "Perc99": 4.517458, "Max": 4.517458}},
		{"reconcile_errors", "count", map[string]float64{"Perc50": 0, "Perc90": 0, "Perc99": 0, "Max": 0}},
		{"operator_rss_max", "MiB", map[string]float64{"Perc50": 63.875, "Perc90": 63.875, "Perc99": 63.875, "Max": 63.875}},
		{"gang_min_cpu", "cores", map[string]float64{"Perc50": 0.3, "Perc90": 0.3, "Perc99": 0.3, "Max": 0.3}},
	} {
		i, ok := items[tc.metric]
		if !ok {
			t.Errorf("%s missing; written: %v", tc.metric, items)
			continue
		}
		if got := latency.DataItems[i]; got.Unit != tc.unit || !reflect.DeepEqual(got.Data, tc.want) {
			t.Errorf("%s = %v %s, want %v %s", tc.metric, got.Data, got.Unit, tc.want, tc.unit)
		}
	}
	if len(items) != 6 {
		t.Errorf("latency items %v, want the 6 measured", items)
	}
	wantLabels := map[string]string{
		"Feature": "latency", "FeatureStatus": "partial", "Verdict": "PARTIAL",
		"Profile": "local", "Cluster": "gpulab-conformance", "Workload": "gpucluster", "Scale": "10",
		"SuiteVersion": "v0.3.0", "SuiteCommit": "cd46c23d90d067d9fb0725c986d5d854cdea1453",
		"OperatorVersion":   "gpulab-operator v0.3.0 (commit cd46c23d90d067d9fb0725c986d5d854cdea1453, built 2026-11-29T10:59:00Z, go1.26.8)",
		"KubernetesVersion": "v1.37.2", "VolcanoVersion": "v1.10.0",
	}
	if !reflect.DeepEqual(latency.Labels, wantLabels) {
		t.Errorf("labels\n%v\nwant\n%v", latency.Labels, wantLabels)
	}

	controller := readPerfData(t, paths[0])
	if len(controller.DataItems) != 2 || controller.DataItems[0].Labels["Metric"] != "valid_create_to_ready" ||
		controller.DataItems[0].Data["Perc99"] != 1120.526345 || controller.DataItems[1].Data["Max"] != 17617.998477 {
		t.Errorf("controller items %+v", controller.DataItems)
	}
	if controller.Labels["FeatureStatus"] != "passed" {
		t.Errorf("controller FeatureStatus %q, want passed", controller.Labels["FeatureStatus"])
	}
}

// readPerfData decodes a file strictly: a field perfdash does not know is
// an error.
func readPerfData(t *testing.T, path string) cl2PerfData {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p cl2PerfData
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p
}

// A median written to results.json and read back (gpulab-conformance
// median --perfdata) gives the same files as the run in memory.
func TestPerfDataOfReadResults(t *testing.T) {
	r := perfRun()
	// results.json cannot hold NaN: drop it as a run that wrote its
	// results would have had to.
	var kept []Measurement
	for _, m := range r.Measurements {
		if !math.IsNaN(m.P50) {
			kept = append(kept, m)
		}
	}
	r.Measurements = kept
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.PerfDataFiles()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Median([]*Results{back}).PerfDataFiles()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from results.json:\n%+v\nin memory:\n%+v", got, want)
	}
}

func TestPerfDataRejects(t *testing.T) {
	noEnd := perfRun()
	noEnd.EndTime = time.Time{}
	if _, err := noEnd.PerfDataFiles(); err == nil || !strings.Contains(err.Error(), "end time") {
		t.Errorf("no end time: %v, want an error naming it", err)
	}
	twice := perfRun()
	twice.Measurements = append(twice.Measurements, Value("latency", "clusters", "count", 11))
	if _, err := twice.PerfDataFiles(); err == nil || !strings.Contains(err.Error(), "latency/clusters twice") {
		t.Errorf("a measurement twice: %v, want an error naming it", err)
	}
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := perfRun().WritePerfData(filepath.Join(blocked, "perfdata")); err == nil {
		t.Error("writing under a file succeeded")
	}
}

func TestPerfDataNamesAreSafe(t *testing.T) {
	r := perfRun()
	r.Environment.Workload = "ray_cluster"
	r.Measurements = []Measurement{Value("gpu fleet_v2", "x", "count", 1)}
	files, err := r.PerfDataFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Name != "GpulabConformance_gpu-fleet-v2_ray-cluster_20261129T110458Z.json" {
		t.Errorf("files %+v: want underscores and spaces replaced, perfdash splits on _", files)
	}
	if files[0].Data.Labels["Feature"] != "gpu fleet_v2" || files[0].Data.Labels["Workload"] != "ray_cluster" {
		t.Errorf("labels %v: want the names unchanged there", files[0].Data.Labels)
	}
}
