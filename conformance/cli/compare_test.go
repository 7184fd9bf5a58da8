package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
)

// writeResultsFile writes r with results.Write into a fresh directory and
// returns the path of its results.json.
func writeResultsFile(t *testing.T, r *results.Results) string {
	t.Helper()
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "results.json")
}

// sampleRun is a passed run with one assessment per feature and the given
// measurements, each "feature/name" in seconds.
func sampleRun(features []string, measurements map[string]float64) *results.Results {
	r := &results.Results{SchemaVersion: results.SchemaVersion, Environment: results.Environment{Profile: "local"}}
	for _, f := range features {
		r.Features = append(r.Features, results.Feature{Name: f, Assessments: []results.Assessment{
			{Name: "holds", Requirement: results.RequirementNone, Status: results.StatusPassed},
		}})
	}
	for key, v := range measurements {
		feature, name, _ := strings.Cut(key, "/")
		r.Measurements = append(r.Measurements, results.Value(feature, name, "seconds", v))
	}
	return r
}

func TestCompareCommand(t *testing.T) {
	baseline := writeResultsFile(t, sampleRun([]string{"gang", "latency"}, map[string]float64{"latency/ready": 2, "latency/bound": 1}))
	same := writeResultsFile(t, sampleRun([]string{"gang", "latency"}, map[string]float64{"latency/ready": 2.1, "latency/bound": 1}))
	slower := writeResultsFile(t, sampleRun([]string{"gang", "latency"}, map[string]float64{"latency/ready": 3, "latency/bound": 1}))
	fewer := writeResultsFile(t, sampleRun([]string{"latency"}, map[string]float64{"latency/ready": 2}))
	failed := sampleRun([]string{"gang", "latency"}, map[string]float64{"latency/ready": 2, "latency/bound": 1})
	failed.Features[0].Assessments[0].Status, failed.Features[0].Assessments[0].Reason = results.StatusFailed, "bound 2 of 4"
	failedPath := writeResultsFile(t, failed)
	notJSON := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(notJSON, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr string
	}{
		{"ok", []string{"--baseline", baseline, "--current", same}, 0, []string{"latency/ready", "comparison: ok"}, ""},
		{"regression", []string{"--baseline", baseline, "--current", slower}, 1, []string{"REGRESSION"}, ""},
		{"regression within a wider limit", []string{"--baseline", baseline, "--current", slower, "--max-regression", "60%"}, 0, []string{"comparison: ok"}, ""},
		{"missing", []string{"--baseline", baseline, "--current", fewer}, 1, []string{"latency/bound", "feature gang: MISSING"}, ""},
		{"missing allowed", []string{"--baseline", baseline, "--current", fewer, "--allow-missing"}, 0, []string{"feature gang: missing (allowed)"}, ""},
		{"failed feature", []string{"--baseline", baseline, "--current", failedPath}, 1, []string{"feature gang failed: holds: bound 2 of 4"}, ""},
		{"no current", []string{"--baseline", baseline}, 2, nil, "usage: gpulab-conformance compare"},
		{"bad percentage", []string{"--baseline", baseline, "--current", same, "--max-regression", "ten"}, 2, nil, "--max-regression"},
		{"unknown flag", []string{"--baseline", baseline, "--current", same, "--bogus"}, 2, nil, "bogus"},
		{"unreadable current", []string{"--baseline", baseline, "--current", filepath.Join(t.TempDir(), "absent.json")}, 2, nil, "reading the current run"},
		{"not JSON", []string{"--baseline", notJSON, "--current", same}, 2, nil, "reading the baseline"},
		{"help", []string{"-h"}, 0, nil, "usage: gpulab-conformance compare"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := compareCommand(tc.args, &stdout, &stderr); got != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", got, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantStderr, stderr.String())
			}
		})
	}
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]float64{"10%": 0.10, "10": 0.10, "2.5 %": 0.025, "0%": 0} {
		if got, err := parsePercent(in); err != nil || got != want {
			t.Errorf("parsePercent(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "ten", "-5%"} {
		if _, err := parsePercent(in); err == nil {
			t.Errorf("parsePercent(%q) accepted it", in)
		}
	}
}
