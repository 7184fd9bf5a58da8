package results

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadRunsDirectory: a directory stands for every results.json under
// it, the runs in path order, a median beside them skipped; a file is read
// as named, a median too.
func TestReadRunsDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(sub string, r *Results) string {
		t.Helper()
		r.SchemaVersion = SchemaVersion
		if err := r.Write(filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, sub, ResultsFile)
	}
	run2 := write("run-2", &Results{Measurements: []Measurement{Value("latency", "ready", "seconds", 2)}})
	run1 := write("run-1", &Results{Measurements: []Measurement{Value("latency", "ready", "seconds", 1)}})
	nested := write("more/run-3", &Results{Measurements: []Measurement{Value("latency", "ready", "seconds", 3)}})
	median := write("median", &Results{Environment: Environment{MergedRuns: 3}})
	if err := os.WriteFile(filepath.Join(dir, "baseline.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, skipped, err := ReadRuns(dir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range runs {
		paths = append(paths, r.Path)
	}
	if want := []string{nested, run1, run2}; !reflect.DeepEqual(paths, want) {
		t.Errorf("runs %q, want %q", paths, want)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], median) || !strings.Contains(skipped[0], "a median of 3 runs") {
		t.Errorf("skipped %q, want the median", skipped)
	}
	runs, skipped, err = ReadRuns(median, run1)
	if err != nil || len(runs) != 2 || runs[0].Path != median || len(skipped) != 0 {
		t.Errorf("files named: %v, skipped %v, %v; want both read", runs, skipped, err)
	}
	if _, _, err := ReadRuns(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no results.json") {
		t.Errorf("an empty directory: %v", err)
	}
	if _, _, err := ReadRuns(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an absent path: %v", err)
	}
	if _, _, err := ReadRuns(); err == nil {
		t.Error("no paths read as no error")
	}
}

// TestReadRunsV1: the v1 baseline in the tree loads as a run; against a
// run that records its host it is not comparable unless allowed, against
// another v1 run it is.
func TestReadRunsV1(t *testing.T) {
	v1, _, err := ReadRuns(filepath.Join("testdata", "v1-run.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(v1) != 1 || len(v1[0].Measurements) == 0 || v1[0].SchemaVersion != SchemaVersion {
		t.Fatalf("v1 read as %+v", v1)
	}
	current := *v1[0].Results
	current.Environment.Host = Host{CPUs: 2}
	_, err = CompareRuns(v1, Runs(&current), CompareOptions{MinEffect: DefaultMinEffect})
	if err == nil || !strings.Contains(err.Error(), "host CPUs: baseline (not recorded), current 2") {
		t.Errorf("v1 against a recorded host: %v, want refused", err)
	}
	if _, err := CompareRuns(v1, Runs(&current), CompareOptions{MinEffect: DefaultMinEffect, AllowDifferent: true}); err != nil {
		t.Errorf("allowed: %v", err)
	}
	c, err := CompareRuns(v1, v1, CompareOptions{MinEffect: DefaultMinEffect})
	if err != nil || c.Failed() {
		t.Errorf("v1 against itself: %v, failed %v", err, c.Failed())
	}
}
