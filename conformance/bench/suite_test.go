package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// fakeSuite is a suite binary that records its arguments, writes the
// results prepared at results (when there are any) into its --out and
// exits 3, as a PARTIAL run does.
func fakeSuite(t *testing.T, prepared string) (suite, args string) {
	t.Helper()
	dir := t.TempDir()
	suite, args = filepath.Join(dir, "suite"), filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + args + "\n" +
		"for a; do case \"$a\" in --out=*) out=\"${a#--out=}\";; esac; done\n" +
		"if [ -f " + prepared + " ]; then mkdir -p \"$out\" && cp " + prepared + " \"$out/results.json\"; fi\nexit 3\n"
	if err := os.WriteFile(suite, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return suite, args
}

// testBed is a bed whose testbed was never brought up and that runs no
// operator: enough for the suite's command line.
func testBed(t *testing.T, suite string) *Bed {
	t.Helper()
	tb, err := local.New(local.Options{Name: "bench-test", CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return &Bed{Testbed: tb, Scale: 7, opts: Options{Suite: suite, Operator: "unused", Out: t.TempDir(), Log: &strings.Builder{}}}
}

func readArgs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// A run's defaults are the latency burst of the bed's scale on
// gpulab's workload, against the bed's kubeconfig and name; the suite's
// exit status is the outcome's, not a failure to read, and the CPU of the
// named processes and the suite's own is recorded.
func TestRunSuiteDefaultsAndCPU(t *testing.T) {
	prepared := filepath.Join(t.TempDir(), "prepared")
	r := &results.Results{SchemaVersion: results.SchemaVersion, Features: []results.Feature{{Name: "latency",
		Assessments: []results.Assessment{{Name: "a", Status: results.StatusPassed}}}}}
	if err := r.Write(prepared); err != nil {
		t.Fatal(err)
	}
	suite, argsFile := fakeSuite(t, filepath.Join(prepared, "results.json"))
	bed := testBed(t, suite)
	out := filepath.Join(t.TempDir(), "run")
	run, err := bed.RunSuite(t.Context(), SuiteRun{Out: out, OperatorMetricsURL: "http://op/metrics", Extra: []string{"--timeout=60m"},
		CPU: map[string]int{"self": os.Getpid(), "gone": -1}, SampleEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if run.Results == nil || run.Results.Verdict != results.VerdictPassed {
		t.Errorf("results = %+v", run.Results)
	}
	if run.Err == nil || !strings.Contains(run.Err.Error(), "exit status 3") {
		t.Errorf("the suite's own failure = %v, want exit status 3", run.Err)
	}
	args := readArgs(t, argsFile)
	for _, want := range []string{"run", "--profile=cluster", "--kubeconfig=" + bed.Testbed.Kubeconfig(), "--workload=gpucluster",
		"--feature=^latency$", "--assess=clusters created at once", "--scale=7", "--operator-metrics-url=http://op/metrics",
		"--out=" + out, "--cluster-name=bench-test", "--timeout=60m"} {
		if !slices.Contains(args, want) {
			t.Errorf("the suite's arguments lack %q: %q", want, args)
		}
	}
	if _, ok := run.CPUSeconds["self"]; !ok {
		t.Errorf("no CPU for a process running throughout: %v", run.CPUSeconds)
	}
	if _, ok := run.CPUSeconds["gone"]; ok {
		t.Errorf("CPU for a process that never ran: %v", run.CPUSeconds)
	}
	if s, ok := run.CPUSeconds[SuiteProcess]; !ok || s < 0 {
		t.Errorf("the suite's own CPU = %v, %v", s, ok)
	}
	if len(run.Samples) < 2 {
		t.Errorf("%d CPU samples, want the run's start and end at least", len(run.Samples))
	}
}

// A run names its workload, scale and features; results that are not
// there fail it with the suite's own failure, and the outcome still
// comes back. Without an output directory or a suite, nothing runs.
func TestRunSuiteWithoutResults(t *testing.T) {
	suite, argsFile := fakeSuite(t, filepath.Join(t.TempDir(), "none"))
	bed := testBed(t, suite)
	run, err := bed.RunSuite(t.Context(), SuiteRun{Out: t.TempDir(), Workload: "bare", Scale: 3, Features: "^(gang|latency)$"})
	if err == nil || run == nil || run.Results != nil || run.Samples != nil {
		t.Fatalf("a run without results = %+v, %v", run, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "exit status 3") || !strings.Contains(msg, "results.json") {
		t.Errorf("error %q lacks the suite's exit status or the missing file", msg)
	}
	args := readArgs(t, argsFile)
	for _, want := range []string{"--workload=bare", "--scale=3", "--feature=^(gang|latency)$", "--operator-metrics-url="} {
		if !slices.Contains(args, want) {
			t.Errorf("the suite's arguments lack %q: %q", want, args)
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--assess=") }) {
		t.Errorf("a run of whole features has an --assess: %q", args)
	}
	if run, err := bed.RunSuite(t.Context(), SuiteRun{}); err == nil || run != nil {
		t.Errorf("a run without an output directory = %+v, %v", run, err)
	}
	bed.opts.Suite = filepath.Join(t.TempDir(), "missing")
	if run, err := bed.RunSuite(t.Context(), SuiteRun{Out: t.TempDir()}); err == nil || run != nil {
		t.Errorf("a suite that cannot start = %+v, %v", run, err)
	}
}

func TestUpRefusesBadBeds(t *testing.T) {
	o := Options{Suite: "s", Operator: "o", Out: t.TempDir(), TestbedName: "bench-test"}
	for _, bed := range []BedOptions{{Scale: 0}, {Scale: 1}} {
		if b, err := o.Up(t.Context(), bed); err == nil || b != nil {
			t.Errorf("%+v: brought up %+v, %v", bed, b, err)
		}
	}
}
