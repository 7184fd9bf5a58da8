package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
)

func TestBaselineCommand(t *testing.T) {
	good := sampleRun([]string{"gang"}, map[string]float64{"latency/ready": 2})
	good.Environment.ClusterName, good.Environment.SuiteCommit = "lab-a", "abc1234"
	good.Timelines = []results.Timeline{{Feature: "latency", Cluster: "c0", StatusReady: 2}}
	from := writeResultsFile(t, good)
	to := filepath.Join(t.TempDir(), "baselines", "local.json")
	var stdout, stderr bytes.Buffer
	if code := baselineCommand([]string{"--from", from, "--to", to}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"PASSED", "1 measurements", "cluster lab-a", "commit abc1234"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	written, err := results.Read(to)
	if err != nil {
		t.Fatalf("the baseline does not read back: %v", err)
	}
	if written.Verdict != results.VerdictPassed || len(written.Measurements) != 1 || written.Timelines != nil || written.Environment.ClusterName != "lab-a" {
		t.Errorf("baseline %+v, want the run's verdict, measurements and environment without timelines", written)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(to), ".*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left beside the baseline: %v", leftovers)
	}
}

func TestBaselineCommandRefuses(t *testing.T) {
	failed := sampleRun([]string{"gang", "latency"}, map[string]float64{"latency/ready": 2})
	failed.Features[0].Assessments[0].Status = results.StatusFailed
	partial := sampleRun([]string{"gang"}, map[string]float64{"latency/ready": 2})
	partial.Features[0].Assessments[0].Status = results.StatusSkipped
	failedPath, partialPath := writeResultsFile(t, failed), writeResultsFile(t, partial)
	for _, tc := range []struct {
		name       string
		args       []string // --to is added, unless noTo
		noTo       bool
		wantCode   int
		wantStderr string
	}{
		{"failed run", []string{"--from", failedPath}, false, 1, "gang failed"},
		{"failed run, partial allowed", []string{"--from", failedPath, "--allow-partial"}, false, 1, "FAILED"},
		{"partial run", []string{"--from", partialPath}, false, 1, "PARTIAL"},
		{"no --to", []string{"--from", partialPath, "--allow-partial"}, true, 2, "usage: gpulab-conformance baseline"},
		{"unreadable run", []string{"--from", filepath.Join(t.TempDir(), "absent.json")}, false, 2, "reading the run"},
		{"bad flag", []string{"--from", partialPath, "--force"}, false, 2, "force"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := filepath.Join(t.TempDir(), "local.json")
			args := tc.args
			if !tc.noTo {
				args = append(append([]string(nil), args...), "--to", to)
			}
			var stdout, stderr bytes.Buffer
			if got := baselineCommand(args, &stdout, &stderr); got != tc.wantCode {
				t.Errorf("exit %d, want %d: %s", got, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantStderr, stderr.String())
			}
			if _, err := os.Stat(to); err == nil {
				t.Errorf("a refused run was written to %s", to)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	to := filepath.Join(t.TempDir(), "local.json")
	if code := baselineCommand([]string{"--from", partialPath, "--to", to, "--allow-partial"}, &stdout, &stderr); code != 0 {
		t.Errorf("--allow-partial refused a partial run: exit %d, %s", code, stderr.String())
	}
}

// TestBaselineCommandSet: several runs, named or found in a directory
// (its median skipped), become a baseline directory with a manifest that
// compare reads as a baseline set; a later promotion replaces it whole.
func TestBaselineCommandSet(t *testing.T) {
	nightly := t.TempDir()
	runs := writeRuns(t, nightly, func(r *results.Results) { r.Environment.SuiteCommit = "abc1234" }, 10, 10.2, 9.9)
	median := sampleRun([]string{"latency"}, map[string]float64{"latency/ready": 10})
	median.Environment.Scale, median.Environment.MergedRuns = 100, 3
	if err := median.Write(filepath.Join(nightly, "median")); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "baselines", "local")
	var stdout, stderr bytes.Buffer
	if code := baselineCommand([]string{"--to", to, nightly}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"3 runs", "from commit abc1234", "run-3/results.json: PASSED run with 1 measurements from " + runs[2]} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "skipped "+filepath.Join(nightly, "median", "results.json")) {
		t.Errorf("stderr does not name the skipped median:\n%s", stderr.String())
	}
	data, err := os.ReadFile(filepath.Join(to, results.BaselineManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m results.BaselineManifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Commit != "abc1234" || m.PromotedAt.IsZero() || len(m.Runs) != 3 || m.Runs[0].Path != "run-1/results.json" || m.Runs[0].From != runs[0] {
		t.Errorf("manifest %+v", m)
	}
	set, _, err := results.ReadRuns(to)
	if err != nil || len(set) != 3 || set[1].Measurements[0].P99 != 10.2 {
		t.Fatalf("the set reads back as %v, %v", set, err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := compareCommand(append([]string{"--baseline", to}, runs...), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "3/3") {
		t.Errorf("the runs against their own set: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	// Promoting two runs replaces the three.
	if code := baselineCommand([]string{"--to", to, runs[0], runs[1]}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if set, _, err := results.ReadRuns(to); err != nil || len(set) != 2 {
		t.Errorf("after replacing: %d runs, %v; want 2", len(set), err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(to), ".*")); len(leftovers) != 0 {
		t.Errorf("temporary files left beside the set: %v", leftovers)
	}
}

func TestBaselineCommandSetRefuses(t *testing.T) {
	good := writeRuns(t, t.TempDir(), nil, 10, 10)
	failed := writeRuns(t, t.TempDir(), func(r *results.Results) { r.Features[0].Assessments[0].Status = results.StatusFailed }, 10)
	other := writeRuns(t, t.TempDir(), func(r *results.Results) { r.Environment.Scale = 10 }, 10)
	notBaseline := t.TempDir()
	if err := os.WriteFile(filepath.Join(notBaseline, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		to         string // default a fresh directory
		wantCode   int
		wantStderr string
	}{
		{"a failed run among them", []string{good[0], failed[0]}, "", 1, failed[0] + ": the run is FAILED"},
		{"runs compare would refuse", []string{good[0], other[0]}, "", 1, "baseline runs differ in scale N"},
		{"several runs into one file", []string{good[0], good[1]}, "local.json", 2, "a .json baseline holds one run"},
		{"a directory that is not a baseline set", []string{good[0]}, notBaseline, 1, "not a baseline set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := tc.to
			switch {
			case to == "":
				to = filepath.Join(t.TempDir(), "set")
			case !filepath.IsAbs(to):
				to = filepath.Join(t.TempDir(), to)
			}
			var stdout, stderr bytes.Buffer
			if got := baselineCommand(append([]string{"--to", to}, tc.args...), &stdout, &stderr); got != tc.wantCode {
				t.Errorf("exit %d, want %d: %s", got, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantStderr, stderr.String())
			}
			if tc.to == "" {
				if _, err := os.Stat(to); err == nil {
					t.Errorf("a refused set was written to %s", to)
				}
			}
		})
	}
	if data, err := os.ReadFile(filepath.Join(notBaseline, "notes.txt")); err != nil || string(data) != "mine" {
		t.Errorf("a directory that was not a baseline set was changed: %q, %v", data, err)
	}
	var stdout, stderr bytes.Buffer
	if code := baselineCommand([]string{"--to", filepath.Join(t.TempDir(), "set"), "--allow-different", good[0], other[0]}, &stdout, &stderr); code != 0 {
		t.Errorf("--allow-different refused: exit %d, %s", code, stderr.String())
	}
}
