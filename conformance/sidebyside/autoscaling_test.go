package sidebyside

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
)

// Every stack runs every workload; the suite's own validation refuses
// native gangs for anything but GPUClusters, and says why.
func TestAutoscalingPairs(t *testing.T) {
	pairs, refused := AutoscalingPairs(AutoscalingStacks("v1.14.1"), DefaultAutoscalingWorkloads)
	var keys []string
	for _, p := range pairs {
		keys = append(keys, p.Key())
	}
	want := []string{"volcano-gpucluster", "volcano-bare", "volcano-raycluster", "volcano-vcjob",
		"kubernetes-gpucluster", "kubernetes-bare", "kubernetes-raycluster", "kubernetes-vcjob"}
	if !slices.Equal(keys, want) {
		t.Errorf("pairs %v, want %v", keys, want)
	}
	for _, key := range []string{"kubernetes-bare", "kubernetes-raycluster", "kubernetes-vcjob"} {
		if why := refused[key]; !strings.Contains(why, "--scheduler=kubernetes gang-schedules gpulab's GPUClusters only") {
			t.Errorf("%s: refused %q, want the suite's reason", key, why)
		}
	}
	if len(refused) != 3 {
		t.Errorf("refused %v, want the three native pairs that are not GPUClusters", refused)
	}
	if got := pairs[4].Label(); got != "Kubernetes gangs, gpucluster" {
		t.Errorf("label %q", got)
	}
	flags := pairs[4].SuiteFlags()
	for _, f := range []string{"--scheduler=kubernetes", "--autoscaler=karpenter", "--nodepool=gpulab-gpu", "--disruptive", "--max-new-nodes=2"} {
		if !slices.Contains(flags, f) {
			t.Errorf("flags %v lack %s", flags, f)
		}
	}
}

func TestAutoscalingDefaults(t *testing.T) {
	o := AutoscalingOptions{}
	o.Suite, o.Operator, o.Out = "s", "o", "d"
	if err := o.defaults(); err != nil || o.Rounds != 3 || !slices.Equal(o.Workloads, DefaultAutoscalingWorkloads) ||
		o.TestbedName != DefaultAutoscalingTestbedName || o.VolcanoVersion == "" {
		t.Fatalf("defaults = %+v, %v", o, err)
	}
	one := AutoscalingOptions{Options: o.Options}
	one.Rounds = 1
	if err := one.defaults(); err != nil {
		t.Errorf("one round refused: %v", err)
	}
	for name, bad := range map[string]AutoscalingOptions{
		"negative rounds": {Options: o.Options, Workloads: []string{"gpucluster"}},
		"an unknown one":  {Options: o.Options, Workloads: []string{"gpucluster", "jobset"}},
		"twice":           {Options: o.Options, Workloads: []string{"bare", "bare"}},
		"a Volcano":       {Options: o.Options, VolcanoVersion: "v0.1"},
	} {
		if name == "negative rounds" {
			bad.Rounds = -1
		}
		if err := bad.defaults(); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// ascRun is one run's results: the three assessments and the
// measurements given (name, value pairs).
func ascRun(status [3]results.Status, reasons [3]string, values ...any) *results.Results {
	f := results.Feature{Name: "autoscaling"}
	for i, a := range autoscalingAssessments {
		as := results.Assessment{Name: a.prefix + ", and so on", Status: status[i], Reason: reasons[i]}
		if status[i] == results.StatusFailed {
			as.Messages = []string{reasons[i]}
		}
		f.Assessments = append(f.Assessments, as)
	}
	r := &results.Results{Features: []results.Feature{f}}
	for i := 0; i+1 < len(values); i += 2 {
		r.Measurements = append(r.Measurements, results.Value("autoscaling", values[i].(string), "seconds", values[i+1].(float64)))
	}
	r.Finalize()
	return r
}

var passed3 = [3]results.Status{results.StatusPassed, results.StatusPassed, results.StatusPassed}

func grown(first, ready, gone float64) *results.Results {
	return ascRun(passed3, [3]string{}, "nodes_needed", 2.0, "nodes_added", 2.0, "extra_nodes", 0.0,
		"create_to_first_node", first, "create_to_nodes_ready", first+1, "create_to_all_bound", ready-1, "create_to_ready", ready, "delete_to_nodes_gone", gone)
}

func TestFeatureNotRun(t *testing.T) {
	skipped := [3]results.Status{results.StatusSkipped, results.StatusSkipped, results.StatusSkipped}
	why := "the autoscaling feature builds GPUClusters and bare gangs, not --workload=vcjob"
	if got, ok := FeatureNotRun(ascRun(skipped, [3]string{why, why, why})); !ok || got != why {
		t.Errorf("every assessment skipped for one reason: %q, %v", got, ok)
	}
	if _, ok := FeatureNotRun(ascRun(skipped, [3]string{"no room", why, why})); ok {
		t.Error("skips for different reasons were taken for the pair's")
	}
	if _, ok := FeatureNotRun(grown(2, 5, 60)); ok {
		t.Error("a run that passed was taken for one that could not run")
	}
	if _, ok := FeatureNotRun(&results.Results{}); ok {
		t.Error("a run without the feature was taken for one the feature skipped")
	}
}

// The report has a row per pair: the rounds' median and range, a scale-up
// that left its gang not Ready, a partial binding, the ratios against the
// first pair, the verdicts with the first reason, and the findings.
func TestAutoscalingReport(t *testing.T) {
	pairs, findings := AutoscalingPairs(AutoscalingStacks("v1.14.1"), []string{"gpucluster", "bare", "raycluster"})
	findings["volcano-raycluster"] = "the feature skips it: the autoscaling feature builds GPUClusters and bare gangs, not --workload=raycluster"
	stuck := "GPUCluster grow, 2 nodes short of room, not Ready: no pod was ever marked Unschedulable"
	partial := "gang grow was partly bound: head bound 3.1 s before its workers"
	rep := AutoscalingReport{Pairs: pairs, Findings: findings, Runs: map[string][]*results.Results{
		"volcano-gpucluster": {grown(2, 10, 60), grown(4, 14, 70), grown(3, 12, 80)},
		"volcano-bare": {
			ascRun([3]results.Status{results.StatusFailed, results.StatusPassed, results.StatusPassed}, [3]string{stuck}, "delete_to_nodes_gone", 75.0),
			ascRun([3]results.Status{results.StatusFailed, results.StatusPassed, results.StatusPassed}, [3]string{partial},
				"nodes_needed", 2.0, "nodes_added", 3.0, "extra_nodes", 1.0, "create_to_first_node", 3.0, "create_to_ready", 20.0, "delete_to_nodes_gone", 65.0),
		},
		"kubernetes-gpucluster": {grown(1, 6, 60), grown(2, 6, 60), grown(1.5, 6, 60)},
	}}
	md := rep.Markdown()
	for _, want := range []string{
		"| stack, workload | runs | scaled up for the gang | create→first node (s) | create→all nodes Ready (s) | create→gang bound (s) | create→gang Ready (s) | scale-down: delete→node gone (s) | nodes added of needed | extra nodes | partial binding seen |",
		"| Volcano v1.14.1, gpucluster | 3 | yes 3/3 | 3 (2–4) | 4 (3–5) | 11 (9–13) | 12 (10–14) | 70 (60–80) | 2 of 2 | 0 | no 3/3 |",
		"| Volcano v1.14.1, bare | 2 | gang not Ready 1/2, yes 1/2 | 3 in 1/2 | - | - | 20 in 1/2 | 70 (65–75) | 3 in 1/2 of 2 | 1 in 1/2 | no 1/2, yes 1/2 |",
		"| Volcano v1.14.1, raycluster | not run (finding) | - | - | - | - | - | - | - | - | - |\n",
		"| Kubernetes gangs, bare | not run (finding) | - |",
		"## Against Volcano v1.14.1, gpucluster (ratio of the medians)",
		"| Kubernetes gangs, gpucluster | 0.50 [0.25, 1.00] | 0.62 [0.40, 1.00] | 0.45 [0.38, 0.56] | 0.50 [0.43, 0.60] | 0.86 [0.75, 1.00] |",
		"| Volcano v1.14.1, bare | 1.00 | - | - | 1.67 | 1.00 [0.81, 1.25] |",
		"| Volcano v1.14.1, bare | failed 2/2 (" + stuck + ") | passed 2/2 | passed 2/2 |",
		"- Volcano v1.14.1, raycluster: the feature skips it: the autoscaling feature builds GPUClusters and bare gangs, not --workload=raycluster",
		"- Kubernetes gangs, bare: the suite refuses it: --scheduler=kubernetes gang-schedules gpulab's GPUClusters only, not --workload=bare",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	var text bytes.Buffer
	rep.Print(&text)
	for _, want := range []string{"Volcano v1.14.1, gpucluster", "against Volcano v1.14.1, gpucluster", "findings: pairs that cannot run the feature"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("printed table lacks %q:\n%s", want, text.String())
		}
	}
	// One round: single values, no intervals.
	one := AutoscalingReport{Pairs: pairs[:1], Runs: map[string][]*results.Results{"volcano-gpucluster": {grown(2, 10, 60)}}}
	if md := one.Markdown(); !strings.Contains(md, "| Volcano v1.14.1, gpucluster | 1 | yes 1/1 | 2 | 3 | 9 | 10 | 60 | 2 of 2 | 0 | no 1/1 |") || strings.Contains(md, "## Against") {
		t.Errorf("one round:\n%s", md)
	}
}
