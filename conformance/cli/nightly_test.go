package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// fakeSuite stands for `gpulab-conformance run`: each call writes the
// next of its runs' results (when not nil) and returns its exit code.
type fakeSuite struct {
	runs  []*results.Results
	codes []int
	calls int
}

func (f *fakeSuite) run(_ context.Context, out string) (int, error) {
	i := f.calls
	f.calls++
	if r := f.runs[i]; r != nil {
		if err := r.Write(out); err != nil {
			return -1, err
		}
	}
	return f.codes[i], nil
}

var twoCPUs = results.Host{CPUs: 2, CPUModel: "AMD EPYC", MemoryBytes: 8 << 30}

// nightRun is a passed run on host measuring latency/ready at ready
// seconds, as the night's cluster lab-a.
func nightRun(ready float64, host results.Host) *results.Results {
	r := sampleRun([]string{"gang", "latency"}, map[string]float64{"latency/ready": ready})
	r.Environment.Host, r.Environment.ClusterName = host, "lab-a"
	r.StartTime = time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC)
	return r
}

// passedNight is three runs around ready seconds, each exiting 0.
func passedNight(ready float64, host results.Host) *fakeSuite {
	return &fakeSuite{runs: []*results.Results{nightRun(ready, host), nightRun(ready*1.02, host), nightRun(ready*0.98, host)}, codes: []int{0, 0, 0}}
}

// runNight runs one night of args (nightly's own flags, then -- run
// flags) against suite and the given store (nil: the one --baseline names).
func runNight(t *testing.T, suite *fakeSuite, store baselineStore, args ...string) (int, string, string) {
	t.Helper()
	o, err := parseNightly(args)
	if err != nil {
		t.Fatalf("parseNightly(%q): %v", args, err)
	}
	if store == nil {
		store, _ = openBaseline(o.Baseline, "", "")
	}
	var stdout, stderr bytes.Buffer
	n := &night{opts: o, store: store, run: suite.run, stdout: &stdout, stderr: &stderr,
		now: func() time.Time { return time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC) }}
	code := n.Run(context.Background())
	return code, stdout.String(), stderr.String()
}

// The three nights: the first records the baseline, an unchanged
// second passes, a third 30% slower fails; each reads the directory the
// one before wrote.
func TestNightlyRecordsThenComparesThenCatchesASlowdown(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "baseline")
	args := []string{"--runs=3", "--out=" + filepath.Join(dir, "out"), "--baseline=" + base}

	code, stdout, stderr := runNight(t, passedNight(2, twoCPUs), nil, args...)
	if code != NightlyPassed || !strings.Contains(stdout, "recorded this night's 3 runs") {
		t.Fatalf("first night: exit %d, want 0 and the baseline recorded:\n%s%s", code, stdout, stderr)
	}
	if runs, _, err := results.ReadRuns(base); err != nil || len(runs) != 3 {
		t.Fatalf("the recorded baseline: %d runs, %v; want 3", len(runs), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "median", results.ResultsFile)); err != nil {
		t.Errorf("no median: %v", err)
	}

	code, stdout, stderr = runNight(t, passedNight(2.02, twoCPUs), nil, args...)
	if code != NightlyPassed || !strings.Contains(stdout, "nothing regressed") || strings.Contains(stdout, "recorded") {
		t.Fatalf("unchanged night: exit %d, want 0 from a comparison:\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = runNight(t, passedNight(2.6, twoCPUs), nil, args...)
	if code != NightlyFailed || !strings.Contains(stdout, "regressed") {
		t.Fatalf("30%% slower night: exit %d, want 1 and a regression:\n%s%s", code, stdout, stderr)
	}
	// The baseline is the first night's still: a failing night replaces nothing.
	runs, _, err := results.ReadRuns(base)
	if err != nil || runs[0].Measurements[0].P99 != 2 {
		t.Errorf("the baseline changed: %v, %v", runs, err)
	}
}

func TestNightlyExitCodes(t *testing.T) {
	partial := nightRun(2, twoCPUs)
	partial.Features[0].Assessments[0].Status, partial.Features[0].Assessments[0].Reason = results.StatusSkipped, "needs --disruptive"
	failed := nightRun(2, twoCPUs)
	failed.Features[0].Assessments[0].Status = results.StatusFailed
	otherHost := results.Host{CPUs: 4, CPUModel: "Intel Xeon", MemoryBytes: 16 << 30}
	otherCluster := passedNight(2, twoCPUs)
	for _, r := range otherCluster.runs {
		r.Environment.ClusterName = "lab-b"
	}
	for _, tc := range []struct {
		name       string
		suite      *fakeSuite
		flags      []string
		wantCode   int
		wantOutput string
	}{
		{"unchanged", passedNight(2, twoCPUs), nil, NightlyPassed, "nothing regressed"},
		{"a run failed", &fakeSuite{runs: []*results.Results{nightRun(2, twoCPUs), failed, nightRun(2, twoCPUs)}, codes: []int{0, 1, 0}},
			nil, NightlyFailed, "run-2 exited 1 (FAILED)"},
		{"a run wrote nothing", &fakeSuite{runs: []*results.Results{nightRun(2, twoCPUs), nil, nightRun(2, twoCPUs)}, codes: []int{0, 2, 0}},
			nil, NightlyFailed, "run-2 exited 2 and wrote no results"},
		{"a run partial", &fakeSuite{runs: []*results.Results{nightRun(2, twoCPUs), partial, nightRun(2, twoCPUs)}, codes: []int{0, 3, 0}},
			nil, NightlyPartial, "run-2 PARTIAL: gang partial"},
		{"a run partial, allowed", &fakeSuite{runs: []*results.Results{nightRun(2, twoCPUs), partial, nightRun(2, twoCPUs)}, codes: []int{0, 3, 0}},
			[]string{"--allow-partial"}, NightlyPassed, "allowed by --allow-partial"},
		{"another host class", passedNight(2, otherHost), nil, NightlyCannotCompare, "host CPUs: baseline 2, current 4"},
		{"another cluster", otherCluster, nil, NightlyCannotCompare, "cluster: baseline lab-a, current lab-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "baseline")
			if code, out, errOut := runNight(t, passedNight(2, twoCPUs), nil, "--out="+filepath.Join(dir, "first"), "--baseline="+base); code != 0 {
				t.Fatalf("recording the baseline: exit %d\n%s%s", code, out, errOut)
			}
			args := append([]string{"--out=" + filepath.Join(dir, "out"), "--baseline=" + base}, tc.flags...)
			code, stdout, stderr := runNight(t, tc.suite, nil, args...)
			if code != tc.wantCode || !strings.Contains(stdout+stderr, tc.wantOutput) {
				t.Errorf("exit %d, want %d with %q:\n%s%s", code, tc.wantCode, tc.wantOutput, stdout, stderr)
			}
		})
	}
}

func TestNightlyFirstNight(t *testing.T) {
	partial := nightRun(2, twoCPUs)
	partial.Features[0].Assessments[0].Status = results.StatusSkipped
	for _, tc := range []struct {
		name     string
		suite    *fakeSuite
		flags    []string
		wantCode int
		recorded bool
		want     string
	}{
		{"no baseline, not recorded", passedNight(2, twoCPUs), []string{"--record-first=false"}, NightlyCannotCompare, false, "--record-first=false"},
		{"a failed night is no baseline", &fakeSuite{runs: []*results.Results{nightRun(2, twoCPUs), nil, nightRun(2, twoCPUs)}, codes: []int{0, 1, 0}},
			nil, NightlyFailed, false, "this night is not one"},
		{"a partial night is no baseline", &fakeSuite{runs: []*results.Results{partial, partial, partial}, codes: []int{3, 3, 3}},
			nil, NightlyPartial, false, "--allow-partial records it"},
		{"a partial night, allowed", &fakeSuite{runs: []*results.Results{partial, partial, partial}, codes: []int{3, 3, 3}},
			[]string{"--allow-partial"}, NightlyPassed, true, "recorded this night's 3 runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "baseline")
			args := append([]string{"--out=" + filepath.Join(dir, "out"), "--baseline=" + base}, tc.flags...)
			code, stdout, stderr := runNight(t, tc.suite, nil, args...)
			if code != tc.wantCode || !strings.Contains(stdout+stderr, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s%s", code, tc.wantCode, tc.want, stdout, stderr)
			}
			if _, err := os.Stat(base); (err == nil) != tc.recorded {
				t.Errorf("baseline written: %v, want %v", err == nil, tc.recorded)
			}
		})
	}
}

// A baseline that cannot be read stops the night before it runs anything.
func TestNightlyUnreadableBaselineRunsNothing(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, results.ResultsFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	suite := passedNight(2, twoCPUs)
	code, stdout, stderr := runNight(t, suite, nil, "--out="+t.TempDir(), "--baseline="+base)
	if code != NightlyCannotCompare || suite.calls != 0 || !strings.Contains(stderr, "cannot compare") {
		t.Errorf("exit %d after %d runs, want 2 after none:\n%s%s", code, suite.calls, stdout, stderr)
	}
}

func fakeConfigMapStore(t *testing.T, objs ...client.Object) (*configMapStore, client.Client) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(local.Scheme).WithObjects(objs...).Build()
	s, err := newConfigMapStore("configmap:gpulab-conformance/nightly", "", "")
	if err != nil {
		t.Fatal(err)
	}
	s.connect = func() (client.Client, error) { return c, nil }
	return s, c
}

// On a cluster the baseline is one labelled ConfigMap: the first night
// writes it, the next reads it back and compares.
func TestNightlyConfigMapBaseline(t *testing.T) {
	store, c := fakeConfigMapStore(t)
	args := []string{"--out=" + t.TempDir(), "--baseline=configmap:gpulab-conformance/nightly", "--", "--profile=cluster"}
	if code, stdout, stderr := runNight(t, passedNight(2, twoCPUs), store, args...); code != NightlyPassed || !strings.Contains(stdout, "recorded") {
		t.Fatalf("first night: exit %d\n%s%s", code, stdout, stderr)
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "gpulab-conformance", Name: "nightly"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels[BaselineSetLabel] != "nightly" || cm.Data[runKey(3)] == "" || cm.Data[results.BaselineManifestFile] == "" {
		t.Errorf("ConfigMap labels %v, keys %d: want the set label, 3 runs and the manifest", cm.Labels, len(cm.Data))
	}
	code, stdout, stderr := runNight(t, passedNight(2.6, twoCPUs), store, args...)
	if code != NightlyFailed || !strings.Contains(stdout, "regressed") {
		t.Errorf("slower night: exit %d, want 1:\n%s%s", code, stdout, stderr)
	}
}

func TestConfigMapStoreNeverReplacesAnotherConfigMap(t *testing.T) {
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpulab-conformance", Name: "nightly"}, Data: map[string]string{"x": "y"}}
	store, c := fakeConfigMapStore(t, foreign)
	r := nightRun(2, twoCPUs)
	if _, err := store.Save(context.Background(), results.Runs(r), []*results.Results{r}, time.Now()); err == nil || !strings.Contains(err.Error(), "not a baseline set") {
		t.Errorf("Save over a foreign ConfigMap: %v, want a refusal", err)
	}
	if _, err := store.Load(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a baseline set") {
		t.Errorf("Load of a foreign ConfigMap: %v, want a refusal", err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(foreign), &cm); err != nil || cm.Data["x"] != "y" {
		t.Errorf("the foreign ConfigMap changed: %v %v", cm.Data, err)
	}
}

func TestParseNightlyRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--baseline is required"},
		{[]string{"--baseline=b", "--runs=0"}, "--runs must be at least 1"},
		{[]string{"--baseline=b", "--", "--out=x"}, "--out after --"},
		{[]string{"--baseline=b", "--", "--dry-run"}, "--dry-run after --"},
		{[]string{"--baseline=b", "--", "--scale=0"}, "run flags (after --): --scale"},
		{[]string{"--baseline=b", "extra"}, "run flags go after --"},
		{[]string{"--baseline=configmap:gpulab-conformance/nightly"}, "the local profile makes a new cluster"},
		{[]string{"--baseline=configmap:nightly", "--", "--profile=cluster"}, "want configmap:NAMESPACE/NAME"},
		{[]string{"--baseline=b", "--gate=("}, "--gate"},
		{[]string{"--baseline=b", "--pushgateway-url=pushgateway:9091"}, "want an http:// or https:// URL"},
		// compare's bounds: a NaN or an infinity would turn the gate off.
		{[]string{"--baseline=b", "--noise-seconds=NaN"}, "--noise-seconds"},
		{[]string{"--baseline=b", "--noise-seconds=+Inf"}, "--noise-seconds"},
		{[]string{"--baseline=b", "--noise-count=Inf"}, "--noise-count"},
	} {
		if _, err := parseNightly(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseNightly(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// Main routes nightly; bad usage is exit 2, -h exit 0 with the flags.
func TestNightlyCommandUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if _, code := Main([]string{"nightly", "-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "-record-first") {
		t.Errorf("nightly -h: exit %d\n%s", code, stdout.String())
	}
	stdout.Reset()
	if _, code := Main([]string{"nightly", "--runs=2"}, &stdout, &stderr); code != NightlyCannotCompare || !strings.Contains(stderr.String(), "--baseline is required") {
		t.Errorf("nightly without --baseline: exit %d\n%s", code, stderr.String())
	}
}
