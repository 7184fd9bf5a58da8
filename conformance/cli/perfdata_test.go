package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulab/gpulab/conformance/results"
)

func TestRunPerfDataFlag(t *testing.T) {
	o, err := ParseRun(nil, io.Discard)
	if err != nil || o.PerfData != "" {
		t.Fatalf("default --perfdata %q (%v), want none", o.PerfData, err)
	}
	// A relative directory becomes absolute and exists once parsed.
	t.Chdir(t.TempDir())
	o, err = ParseRun([]string{"--perfdata=perf/run-1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(o.PerfData) || filepath.Base(o.PerfData) != "run-1" {
		t.Errorf("--perfdata parsed to %q, want an absolute .../perf/run-1", o.PerfData)
	}
	if fi, err := os.Stat(o.PerfData); err != nil || !fi.IsDir() {
		t.Errorf("--perfdata directory not created: %v", err)
	}
	if entries, _ := os.ReadDir(o.PerfData); len(entries) != 0 {
		t.Errorf("the writability probe was left behind: %v", entries)
	}
}

func TestRunPerfDataRejects(t *testing.T) {
	file := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--perfdata="}, "--perfdata must not be empty"},
		{[]string{"--perfdata", file + "/perf"}, `--perfdata="` + file + `/perf"`},
		{[]string{"--perfdata", file}, `--perfdata="` + file + `"`},
	} {
		if _, err := ParseRun(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestMedianCommandPerfData(t *testing.T) {
	var runs []string
	for i, p99 := range []float64{1, 9, 2} {
		r := sampleRun([]string{"latency"}, map[string]float64{"latency/ready": p99})
		r.StartTime = time.Date(2026, 12, 1, 2, 17, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
		r.EndTime = r.StartTime.Add(30 * time.Minute)
		runs = append(runs, writeResultsFile(t, r))
	}
	out, perf := t.TempDir(), filepath.Join(t.TempDir(), "perfdata")
	var stdout, stderr bytes.Buffer
	if code := medianCommand(append([]string{"--out", out, "--perfdata", perf}, runs...), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The merged run ends when the last run ended.
	data, err := os.ReadFile(filepath.Join(perf, "GpulabConformance_latency_gpucluster_20261201T044700Z.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p results.PerfData
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.DataItems) != 1 || p.DataItems[0].Labels["Metric"] != "ready" || p.DataItems[0].Unit != "ms" || p.DataItems[0].Data["Perc99"] != 2000 {
		t.Errorf("perfdata %+v, want ready's median p99, 2 s, as 2000 ms", p)
	}
}

func TestMedianCommandPerfDataEarlyError(t *testing.T) {
	run := writeResultsFile(t, sampleRun([]string{"latency"}, nil))
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := medianCommand([]string{"--out", out, "--perfdata", filepath.Join(file, "perf"), run}, &stdout, &stderr); code != results.ExitUsage {
		t.Errorf("exit %d, want %d: %s", code, results.ExitUsage, stderr.String())
	}
	if !strings.Contains(stderr.String(), "--perfdata=") {
		t.Errorf("stderr %q, want the --perfdata error", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "results.json")); err == nil {
		t.Error("median wrote its results before refusing --perfdata")
	}
}
