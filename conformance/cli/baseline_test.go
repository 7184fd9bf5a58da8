package cli

import (
	"bytes"
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
