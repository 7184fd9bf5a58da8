package sidebyside

import (
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
)

func run(verdictPassed bool, ready float64, gpus float64, extra ...results.Measurement) *results.Results {
	r := &results.Results{Features: []results.Feature{{Name: "latency", Assessments: []results.Assessment{{Name: "a", Status: results.StatusPassed}}}}}
	if !verdictPassed {
		r.Features[0].Assessments[0].Status = results.StatusFailed
	}
	r.Measurements = append([]results.Measurement{
		results.Distribution("latency", "create_to_status_ready", "seconds", []float64{ready / 2, ready}),
		results.Value("latency", "clusters", "count", 100),
		results.Value("latency", "gang_min_member", "pods", 3),
		results.Value("latency", "gang_min_cpu", "millicores", 300),
		results.Value("latency", "gang_min_memory", "bytes", 402653184),
		results.Value("latency", "gang_min_gpus", "gpus", gpus),
		results.Value("latency", "operator_rss_max", "bytes", 80<<20),
	}, extra...)
	r.Finalize()
	return r
}

func TestRowsAndRatios(t *testing.T) {
	runs := map[string][]*results.Results{
		"gpucluster": {run(true, 2, 8), run(true, 4, 8)},
		"raycluster": {run(true, 6, 8), run(true, 10, 8)},
	}
	if err := CheckSameGangs(runs); err != nil {
		t.Fatal(err)
	}
	md := Markdown(Rows(runs))
	// p99 of Ready: gpulab 2–4 (median 3), KubeRay 6–10 (median 8): 8/3.
	if !strings.Contains(md, "| create_to_status_ready p99 | seconds | 2–4 | 6–10 | 2.67 |") {
		t.Errorf("table:\n%s", md)
	}
	if !strings.Contains(md, "| operator_rss_max | MiB | 80 | 80 | 1.00 |") {
		t.Errorf("RSS not in MiB:\n%s", md)
	}
	if !strings.Contains(md, "| api_conflicts |  | - | - | - |") {
		t.Errorf("a measurement neither side has is not shown as missing:\n%s", md)
	}
}

func TestCheckSameGangsRefuses(t *testing.T) {
	for name, runs := range map[string]map[string][]*results.Results{
		"different GPUs": {"gpucluster": {run(true, 2, 8)}, "raycluster": {run(true, 2, 4)}},
		"a failed run":   {"gpucluster": {run(true, 2, 8)}, "raycluster": {run(false, 2, 8)}},
		"a side missing": {"gpucluster": {run(true, 2, 8)}},
		"shape not measured": {"gpucluster": {run(true, 2, 8)}, "raycluster": {{Measurements: []results.Measurement{results.Value("latency", "clusters", "count", 100)},
			Features: []results.Feature{{Name: "latency", Assessments: []results.Assessment{{Name: "a", Status: results.StatusPassed}}}}}}},
	} {
		for _, rs := range runs {
			for _, r := range rs {
				r.Finalize()
			}
		}
		if err := CheckSameGangs(runs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
