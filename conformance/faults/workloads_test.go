package faults

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/testbin"
)

// TestOtherWorkloadsPass: the gang and latency features pass at scale 10
// on the local testbed for KubeRay's RayClusters (the testbed runs KubeRay
// v1.5.0 with Volcano batch scheduling) and for Volcano Jobs, every
// detector following their pods by owner reference.
func TestOtherWorkloadsPass(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	testbin.SkipUnlessLong(t)
	t.Parallel()
	build(t)
	for _, workload := range []string{"raycluster", "vcjob"} {
		t.Run(workload, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			log, err := runSuite("", out, "--workload="+workload, "--scale=10", "--feature=^(latency|gang)$", "--testbed-name=gpulab-"+workload)
			if err != nil {
				t.Fatalf("the suite failed on %s (exit %d):\n%s", workload, exitCode(err), tail(log))
			}
			r, err := results.Read(filepath.Join(out, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != results.VerdictPassed || len(r.Features) != 2 || r.Environment.Workload != workload {
				t.Errorf("verdict %s, %d features, workload %q; want PASSED with latency and gang on %s:\n%s",
					r.Verdict, len(r.Features), r.Environment.Workload, workload, r.Markdown())
			}
			clusters := -1.0
			for _, m := range r.Measurements {
				if m.Feature == "latency" && m.Name == "clusters" {
					clusters = m.P99
				}
			}
			if clusters != 10 {
				t.Errorf("latency measured %v gangs, want 10", clusters)
			}
		})
	}
}

// TestPlantedVolcanoJobFaultIsCaught: Volcano Jobs whose minAvailable is 1
// (of 3 pods) are not gangs, so when four contend for room for two Volcano
// binds them partly; the partial-binding detector must fail the run.
func TestPlantedVolcanoJobFaultIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	t.Parallel()
	build(t)
	out := t.TempDir()
	log, err := runSuiteWith([]string{"GPULAB_PLANTED_SUITE_FAULT=vcjob-min-available"}, out,
		append([]string{"--workload=vcjob", "--testbed-name=gpulab-vcjob-fault"}, contention...)...)
	if code := exitCode(err); code != results.ExitFailed {
		t.Fatalf("exit %d (%v), want %d: the detectors missed Volcano Jobs with minAvailable 1:\n%s", code, err, results.ExitFailed, tail(log))
	}
	r, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range r.Features {
		for _, m := range f.Messages() {
			found = found || strings.Contains(m, "partly bound")
		}
	}
	if !found {
		t.Errorf("the run failed, but not for a partly bound gang:\n%s", r.Markdown())
	}
}
