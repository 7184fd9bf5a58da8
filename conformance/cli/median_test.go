package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
)

func TestMedianCommand(t *testing.T) {
	var pushed []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		pushed = append(pushed, req.URL.Path)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	var runs []string
	for _, p99 := range []float64{1, 9, 2} {
		runs = append(runs, writeResultsFile(t, sampleRun([]string{"latency"}, map[string]float64{"latency/ready": p99})))
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := append([]string{"--out", out, "--cluster-name", "lab-a", "--pushgateway-url", srv.URL}, runs...)
	if code := medianCommand(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	merged, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if merged.Environment.ClusterName != "lab-a" || merged.Measurements[0].P99 != 2 {
		t.Errorf("merged %+v, want cluster lab-a and the median p99 2", merged)
	}
	if len(pushed) != 1 || !strings.Contains(pushed[0], "/cluster/lab-a") {
		t.Errorf("pushed to %v, want one push grouped by cluster lab-a", pushed)
	}
}

// TestMedianCommandPushBaseline: the band's runs are read before the push
// and a baseline that cannot be read is a usage error, not a push without
// its band; --push-baseline alone is refused.
func TestMedianCommandPushBaseline(t *testing.T) {
	var pushes int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		pushes++
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	run := writeResultsFile(t, sampleRun([]string{"latency"}, map[string]float64{"latency/ready": 1}))
	base := t.TempDir()
	writeRuns(t, base, nil, 1, 2)
	for _, tc := range []struct {
		args   []string
		code   int
		pushes int
	}{
		{[]string{"--out", t.TempDir(), "--pushgateway-url", srv.URL, "--push-baseline", base, run}, 0, 1},
		{[]string{"--out", t.TempDir(), "--pushgateway-url", srv.URL, "--push-baseline", filepath.Join(base, "none"), run}, 2, 1},
		{[]string{"--out", t.TempDir(), "--push-baseline", base, run}, 2, 1},
	} {
		var stdout, stderr bytes.Buffer
		if code := medianCommand(tc.args, &stdout, &stderr); code != tc.code || pushes != tc.pushes {
			t.Errorf("%v: exit %d after %d pushes in all, want %d after %d: %s", tc.args, code, pushes, tc.code, tc.pushes, stderr.String())
		}
	}
}

// TestMedianCommandDirectory: a directory stands for the runs under it;
// the merged results say how many runs they merged.
func TestMedianCommandDirectory(t *testing.T) {
	nightly := t.TempDir()
	writeRuns(t, nightly, nil, 1, 9, 2)
	out := filepath.Join(nightly, "median")
	var stdout, stderr bytes.Buffer
	if code := medianCommand([]string{"--out", out, nightly}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	merged, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if merged.Measurements[0].P99 != 2 || merged.Environment.MergedRuns != 3 {
		t.Errorf("merged p99 %v of %d runs, want 2 of 3", merged.Measurements[0].P99, merged.Environment.MergedRuns)
	}
	// Run again, the median now beside the runs: it is skipped, not merged.
	stdout.Reset()
	if code := medianCommand([]string{"--out", t.TempDir(), nightly}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "skipped "+filepath.Join(out, "results.json")) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

func TestMedianCommandUsage(t *testing.T) {
	run := writeResultsFile(t, sampleRun([]string{"latency"}, nil))
	for name, args := range map[string][]string{
		"no --out":       {run},
		"no runs":        {"--out", t.TempDir()},
		"unreadable run": {"--out", t.TempDir(), filepath.Join(t.TempDir(), "absent.json")},
		"bad flag":       {"--bogus"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := medianCommand(args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2: %s", code, stderr.String())
			}
		})
	}
}
