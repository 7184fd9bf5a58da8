package cli

import (
	"bytes"
	"fmt"
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

// writeRuns writes one run per value of latency/ready (seconds) into
// dir/run-<i>/ and returns their results.json paths.
func writeRuns(t *testing.T, dir string, change func(*results.Results), values ...float64) []string {
	t.Helper()
	var paths []string
	for i, v := range values {
		r := sampleRun([]string{"latency"}, map[string]float64{"latency/ready": v})
		r.Environment.Scale = 100
		if change != nil {
			change(r)
		}
		out := filepath.Join(dir, fmt.Sprintf("run-%d", i+1))
		if err := r.Write(out); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(out, "results.json"))
	}
	return paths
}

// TestCompareCommandRuns: several runs a side, as files or directories,
// flags before or after them; the row gives the interval and runs.
func TestCompareCommandRuns(t *testing.T) {
	baseDir := t.TempDir()
	writeRuns(t, baseDir, nil, 10, 10.2, 9.9)
	median := sampleRun([]string{"latency"}, map[string]float64{"latency/ready": 10})
	median.Environment.Scale, median.Environment.MergedRuns = 100, 3
	if err := median.Write(filepath.Join(baseDir, "median")); err != nil {
		t.Fatal(err)
	}
	slowerDir, noisyDir, slightlyDir := t.TempDir(), t.TempDir(), t.TempDir()
	slower := writeRuns(t, slowerDir, nil, 15, 15.3, 14.8)
	writeRuns(t, noisyDir, nil, 15, 9, 21)
	slightly := writeRuns(t, slightlyDir, nil, 11, 11.1, 10.9)
	smaller := writeRuns(t, t.TempDir(), func(r *results.Results) { r.Environment.Scale = 50 }, 10, 10, 10)
	mixed := append(writeRuns(t, t.TempDir(), nil, 10, 10), writeRuns(t, t.TempDir(), func(r *results.Results) { r.Environment.Workload = "vcjob" }, 10)...)
	for _, tc := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr []string
	}{
		{"a clear +50% over 3 runs a side, directories", []string{"--baseline", baseDir, "--current", slowerDir}, 1,
			[]string{"latency/ready", "lower", "3/3", "+50.0%", "[+45.1%, +54.5%]", "REGRESSION", "percentile bootstrap"},
			[]string{"skipped " + filepath.Join(baseDir, "median", "results.json") + " (a median of 3 runs)"}},
		{"the current runs named after the flags", append([]string{"--baseline", baseDir}, slower...), 1, []string{"3/3", "REGRESSION"}, nil},
		{"flags after the runs", append(append([]string{}, slower...), "--baseline", baseDir, "--min-effect", "60%"), 0, []string{"3/3", "unchanged", "60%"}, nil},
		{"--current and names mixed", []string{"--baseline", baseDir, "--current", slower[0], slower[1], slower[2]}, 1, []string{"3/3"}, nil},
		{"+50% within noisy runs is not significant", []string{"--baseline", baseDir, noisyDir}, 0,
			[]string{"[-11.8%, +112.1%]", "not significant", "comparison: ok (0 improved, 1 not significant, 0 unchanged)"}, nil},
		{"a significant +10% is below the minimum effect", []string{"--baseline", baseDir, slightlyDir}, 0, []string{"[+6.9%, +12.1%]", "unchanged"}, nil},
		{"a per-measurement minimum effect", []string{"--baseline", baseDir, "--min-effect-for", "latency/ready=5%", slightlyDir}, 1, []string{"5%", "REGRESSION"}, nil},
		{"one run a side", []string{"--baseline", filepath.Join(baseDir, "run-1", "results.json"), slower[0]}, 1, []string{"no interval (1 run a side)", "REGRESSION"}, nil},
		{"a lower confidence, another statistic", []string{"--baseline", baseDir, "--confidence", "80%", "--statistic", "p50", "--resamples", "2000", slightly[0], slightly[1]},
			0, []string{"80% INTERVAL", "BASELINE p50", "2000 resamples"}, nil},
		{"another scale N is refused", []string{"--baseline", baseDir, "--current", smaller[0]}, 2, nil,
			[]string{"not comparable", "scale N: baseline 100, current 50", "--allow-different"}},
		{"another scale N, allowed", []string{"--baseline", baseDir, "--current", smaller[0], "--allow-different"}, 0,
			[]string{"differs (compared anyway): scale N: baseline 100, current 50"}, nil},
		{"current runs that differ among themselves are refused", append([]string{"--baseline", baseDir}, mixed...), 2, nil,
			[]string{"current runs differ in workload: " + mixed[0] + " gpucluster, " + mixed[2] + " vcjob"}},
		{"the v1 baseline in the tree against itself", []string{"--baseline", filepath.Join("..", "results", "testdata", "v1-run.json"), filepath.Join("..", "results", "testdata", "v1-run.json")}, 0,
			[]string{"comparison: ok"}, nil},
		{"the v1 baseline against a run that records its host", []string{"--baseline", filepath.Join("..", "results", "testdata", "v1-run.json"),
			writeResultsFile(t, func() *results.Results {
				r, err := results.Read(filepath.Join("..", "results", "testdata", "v1-run.json"))
				if err != nil {
					t.Fatal(err)
				}
				r.Environment.Host = results.Host{CPUs: 2, CPUModel: "AMD EPYC", MemoryBytes: 8 << 30}
				return r
			}())}, 2, nil, []string{"host CPUs: baseline (not recorded), current 2"}},
		{"both --min-effect and --max-regression", []string{"--baseline", baseDir, "--min-effect", "10%", "--max-regression", "10%", slowerDir}, 2, nil, []string{"old name"}},
		{"a bad --min-effect-for", []string{"--baseline", baseDir, "--min-effect-for", "ready", slowerDir}, 2, nil, []string{"feature/name=PCT"}},
		{"a bad --confidence", []string{"--baseline", baseDir, "--confidence", "100%", slowerDir}, 2, nil, []string{"--confidence"}},
		{"a bad --statistic", []string{"--baseline", baseDir, "--statistic", "p95", slowerDir}, 2, nil, []string{"--statistic"}},
		{"an empty directory", []string{"--baseline", t.TempDir(), slowerDir}, 2, nil, []string{"reading the baseline", "no results.json"}},
		{"no baseline", []string{slowerDir}, 2, nil, []string{"usage: gpulab-conformance compare"}},
		{"after --, names only", []string{"--baseline", baseDir, "--", slower[0]}, 1, []string{"3/1"}, nil},
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
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
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

// TestCompareRefusesValuesThatSwitchTheGateOff: NaN or infinite
// confidence, effects and noise would let every regression pass, and
// billions of resamples exhaust memory; each is bad usage naming its flag.
func TestCompareRefusesValuesThatSwitchTheGateOff(t *testing.T) {
	baseline := writeResultsFile(t, sampleRun([]string{"latency"}, map[string]float64{"latency/ready": 2}))
	slower := writeResultsFile(t, sampleRun([]string{"latency"}, map[string]float64{"latency/ready": 3}))
	for _, tc := range []struct{ flag, value, wantStderr string }{
		{"--confidence", "NaN%", "--confidence"},
		{"--confidence", "Inf%", "--confidence"},
		{"--confidence", "100%", "--confidence"},
		{"--min-effect", "Inf%", "--min-effect"},
		{"--min-effect", "NaN", "--min-effect"},
		{"--max-regression", "+Inf%", "--max-regression"},
		{"--min-effect-for", "latency/ready=Inf%", "min-effect-for"},
		{"--min-effect-for", "latency/ready=NaN%", "min-effect-for"},
		{"--noise-seconds", "+Inf", "--noise-seconds"},
		{"--noise-seconds", "NaN", "--noise-seconds"},
		{"--noise-count", "Inf", "--noise-count"},
		{"--noise-count", "-1", "--noise-count"},
		{"--resamples", "2000000000", "--resamples"},
		{"--resamples", "1000001", "--resamples"},
		{"--resamples", "99", "--resamples"},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := compareCommand([]string{"--baseline", baseline, "--current", slower, tc.flag + "=" + tc.value}, &stdout, &stderr)
			if code != results.ExitUsage || !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("exit %d, want 2 naming %s\nstdout:\n%s\nstderr:\n%s", code, tc.wantStderr, stdout.String(), stderr.String())
			}
		})
	}
	// The bounds themselves are fine.
	var stdout, stderr bytes.Buffer
	if code := compareCommand([]string{"--baseline", baseline, "--current", slower, "--resamples=1000000", "--noise-seconds=0", "--min-effect=0%"}, &stdout, &stderr); code != results.ExitFailed {
		t.Errorf("at the bounds: exit %d, want 1 (a regression)\n%s%s", code, stdout.String(), stderr.String())
	}
}
