package sidebyside

import (
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/bench"
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
		"bare":       {run(true, 1, 8), run(true, 2, 8), run(true, 3, 8)},
		"gpucluster": {run(true, 2, 8), run(true, 3, 8), run(true, 4, 8)},
		"raycluster": {run(true, 6, 8), run(true, 8, 8), run(true, 10, 8)},
	}
	if err := Operators.CheckSameGangs(runs); err != nil {
		t.Fatal(err)
	}
	md := Operators.Markdown(Operators.Rows(runs))
	// p99 of Ready: floor 1–3 (median 2), gpulab 2–4 (3), KubeRay 6–10
	// (8). gpulab / floor 1.5, KubeRay / gpulab 8/3; each interval spans
	// the extreme ratios of the rounds' medians.
	if !strings.Contains(md, "| create_to_status_ready p99 | seconds | 1–3 | 2–4 | 6–10 | 1.50 [0.67, 4.00] | 2.67 [1.50, 5.00] |") {
		t.Errorf("table:\n%s", md)
	}
	if !strings.Contains(md, "| operator_rss_max | MiB | 80 | 80 | 80 | 1.00 [1.00, 1.00] | 1.00 [1.00, 1.00] |") {
		t.Errorf("RSS not in MiB:\n%s", md)
	}
	if !strings.Contains(md, "| api_conflicts |  | - | - | - | - | - |") {
		t.Errorf("a measurement no side has is not shown as missing:\n%s", md)
	}
}

// The order rotates: each side is first, in the middle and last once in
// three rounds.
func TestOrderRotates(t *testing.T) {
	pos := map[string]map[int]bool{}
	for round := 1; round <= 3; round++ {
		for i, w := range bench.Order(round, Workloads) {
			if pos[w] == nil {
				pos[w] = map[int]bool{}
			}
			pos[w][i] = true
		}
	}
	for _, w := range Workloads {
		if len(pos[w]) != 3 {
			t.Errorf("%s ran at positions %v over 3 rounds, want each of 0, 1, 2", w, pos[w])
		}
	}
}

func TestCheckSameGangsRefuses(t *testing.T) {
	for name, runs := range map[string]map[string][]*results.Results{
		"different GPUs": {"bare": {run(true, 2, 8)}, "gpucluster": {run(true, 2, 8)}, "raycluster": {run(true, 2, 4)}},
		"a failed run":   {"bare": {run(true, 2, 8)}, "gpucluster": {run(true, 2, 8)}, "raycluster": {run(false, 2, 8)}},
		"a side missing": {"gpucluster": {run(true, 2, 8)}, "raycluster": {run(true, 2, 8)}},
		"shape not measured": {"bare": {run(true, 2, 8)}, "gpucluster": {run(true, 2, 8)}, "raycluster": {{Measurements: []results.Measurement{results.Value("latency", "clusters", "count", 100)},
			Features: []results.Feature{{Name: "latency", Assessments: []results.Assessment{{Name: "a", Status: results.StatusPassed}}}}}}},
	} {
		for _, rs := range runs {
			for _, r := range rs {
				r.Finalize()
			}
		}
		if err := Operators.CheckSameGangs(runs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The scheduler table compares every side with the first Volcano, accepts
// native gangs that ask for a count only, and still refuses a native run
// whose count differs.
func TestSchedulersTable(t *testing.T) {
	table := Schedulers([]string{"v1.14.1", "v1.10.0"})
	nativeRun := func(minMember float64) *results.Results {
		r := &results.Results{Features: []results.Feature{{Name: "latency", Assessments: []results.Assessment{{Name: "a", Status: results.StatusPassed}}}},
			Measurements: []results.Measurement{
				results.Distribution("latency", "create_to_pods_ready", "seconds", []float64{3}),
				results.Value("latency", "clusters", "count", 100),
				results.Value("latency", "gang_min_member", "pods", minMember),
			}}
		r.Finalize()
		return r
	}
	ready := func(v float64) results.Measurement {
		return results.Distribution("latency", "create_to_pods_ready", "seconds", []float64{v})
	}
	runs := map[string][]*results.Results{
		"volcano-v1.14.1": {run(true, 1, 8, ready(2)), run(true, 1, 8, ready(2))},
		"volcano-v1.10.0": {run(true, 1, 8, ready(4)), run(true, 1, 8, ready(4))},
		"kubernetes":      {nativeRun(3), nativeRun(3)},
	}
	if err := table.CheckSameGangs(runs); err != nil {
		t.Fatal(err)
	}
	md := table.Markdown(table.Rows(runs))
	for _, want := range []string{
		"| MEASUREMENT | UNIT | Volcano v1.14.1 | Volcano v1.10.0 | Kubernetes gangs | Volcano v1.10.0 / Volcano v1.14.1 | Kubernetes gangs / Volcano v1.14.1 |",
		"| create_to_pods_ready p99 | seconds | 2 | 4 | 3 | 2.00 [2.00, 2.00] | 1.50 [1.50, 1.50] |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	if v := verdicts(table, runs); !strings.Contains(v, "| latency | passed 2/2 | passed 2/2 | passed 2/2 |") {
		t.Errorf("verdicts:\n%s", v)
	}
	runs["kubernetes"] = []*results.Results{nativeRun(2)}
	if err := table.CheckSameGangs(runs); err == nil {
		t.Error("a native gang of another size was accepted")
	}
	runs["kubernetes"] = []*results.Results{run(true, 1, 4)}
	if err := table.CheckSameGangs(runs); err == nil {
		t.Error("a native gang asking other GPUs was accepted")
	}
}
