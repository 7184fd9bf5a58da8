// Package results is the conformance suite's output: a versioned
// results.json, JUnit XML and a Markdown report, and the comparison of a run
// against a baseline for nightly regression jobs. It imports no test
// framework, so command-line tools can reuse it.
package results

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// SchemaVersion identifies the results.json format. v2 records every
// assessment with its status, reason and requirement, and (added later,
// optional, so older v2 files read with them empty) the host, the
// scheduler and how many runs a median merged; Read still accepts v1.
const SchemaVersion = "conformance.gpulab.io/v2"

// SchemaVersionV1 is the format before per-assessment verdicts.
const SchemaVersionV1 = "conformance.gpulab.io/v1"

// Results is one run of the suite.
type Results struct {
	SchemaVersion string `json:"schemaVersion"`
	// Verdict and Evidence are derived from Features by Finalize.
	Verdict     Verdict     `json:"verdict"`
	StartTime   time.Time   `json:"startTime"`
	EndTime     time.Time   `json:"endTime"`
	Environment Environment `json:"environment"`
	Features    []Feature   `json:"features"`
	Evidence    []Evidence  `json:"evidence"`
	// Requested are the checklist requirements the run was asked to
	// evidence (Requested); one not tested makes it PARTIAL.
	Requested []Requirement `json:"requestedRequirements,omitempty"`
	// RequirementsSelected says Requested is a --requirements selection:
	// then only failures, and skips in assessments that evidence a
	// selected requirement, decide the verdict (SelectedVerdict).
	RequirementsSelected bool `json:"requirementsSelected,omitempty"`
	// Unavailable are requirements this cluster has nothing to show for
	// (Unavailable: cluster_autoscaling without an autoscaler); their
	// skipped assessments are reported and do not decide the verdict.
	Unavailable  []Requirement `json:"unavailableRequirements,omitempty"`
	Measurements []Measurement `json:"measurements"`
	// Warnings are what a reader of the numbers should know that is no
	// verdict: the run shared the cluster (--allow-concurrent), or lost its
	// run lock on the way.
	Warnings []string `json:"warnings,omitempty"`
	// Timelines are per-cluster milestones of runs worth drawing (latency),
	// in seconds since the cluster's create; a missing milestone is -1.
	Timelines []Timeline `json:"timelines,omitempty"`
	// TimelineOrigins is when each feature's timelines start (its first
	// create), so a tool that sampled the machine meanwhile (bench-scale's
	// CPU) can line its samples up with them.
	TimelineOrigins map[string]time.Time `json:"timelineOrigins,omitempty"`
}

// Timeline is one cluster's way from create to Ready, as watched.
type Timeline struct {
	Feature string `json:"feature"`
	Cluster string `json:"cluster"`
	// Start is seconds from the first create of the feature's run.
	Start       float64 `json:"start"`
	PodGroup    float64 `json:"podGroup"`
	PodsCreated float64 `json:"podsCreated"`
	AllBound    float64 `json:"allBound"`
	PodsReady   float64 `json:"podsReady"`
	StatusReady float64 `json:"statusReady"`
}

// Environment says what the run ran on.
type Environment struct {
	Profile           string         `json:"profile"`
	KubernetesVersion string         `json:"kubernetesVersion"`
	VolcanoVersion    string         `json:"volcanoVersion,omitempty"`
	Nodes             int            `json:"nodes"`
	GPUsByProduct     map[string]int `json:"gpusByProduct"`
	OperatorVersion   string         `json:"operatorVersion,omitempty"`
	OperatorCommit    string         `json:"operatorCommit,omitempty"`
	// SuiteVersion and SuiteCommit name the conformance suite's build, so a
	// comparison says which suites produced its two sides.
	SuiteVersion string `json:"suiteVersion,omitempty"`
	SuiteCommit  string `json:"suiteCommit,omitempty"`
	// ClusterName tells apart clusters that run the same profile (nightly
	// pushes are grouped by it).
	ClusterName string `json:"clusterName,omitempty"`
	// Workload is the kind of gang measured: gpucluster, raycluster or
	// vcjob (empty in older results: gpucluster).
	Workload string `json:"workload,omitempty"`
	Scale    int    `json:"scale"`
	// Scheduler is who gang-schedules: volcano or kubernetes (empty in
	// older results: volcano, SchedulerName), and SchedulerVersion its
	// version where known.
	Scheduler        string `json:"scheduler,omitempty"`
	SchedulerVersion string `json:"schedulerVersion,omitempty"`
	// GPUAllocation is dra when the gangs claimed their GPUs through
	// Dynamic Resource Allocation (empty: nvidia.com/gpu;
	// GPUAllocationName).
	GPUAllocation string `json:"gpuAllocation,omitempty"`
	// Host is the machine the suite ran on (zero in results written before
	// it was recorded). With Scale, Workload, Profile and Scheduler it
	// decides which runs compare may compare.
	Host Host `json:"host,omitzero"`
	// MergedRuns is how many runs `median` merged into these results; 0
	// for a run. compare and baseline skip merged results found in a
	// directory, so a median is not counted beside the runs it came from.
	MergedRuns int `json:"mergedRuns,omitempty"`
}

// WorkloadName is the workload measured; results from before --workload
// measured only GPUClusters.
func (e Environment) WorkloadName() string {
	if e.Workload == "" {
		return "gpucluster"
	}
	return e.Workload
}

// Feature is one feature's assessments and the status they add up to
// (FeatureStatus; passed, partial or failed).
type Feature struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Status      Status            `json:"status"`
	Seconds     float64           `json:"seconds"`
	Assessments []Assessment      `json:"assessments"`
}

// Assessment is one assessment's own outcome.
type Assessment struct {
	Name string `json:"name"`
	// Requirement is the AI-conformance item it evidences (RequirementNone
	// for gpulab's own checks).
	Requirement Requirement `json:"requirement"`
	// Status is passed, failed or skipped.
	Status Status `json:"status"`
	// Reason says why it was skipped, or its first failure.
	Reason string `json:"reason,omitempty"`
	// Messages are every failure, in order.
	Messages []string `json:"messages,omitempty"`
	Seconds  float64  `json:"seconds"`
}

// Messages are the reasons of the feature's assessments that did not pass,
// each as "assessment: reason".
func (f Feature) Messages() []string {
	var out []string
	for _, a := range f.Assessments {
		switch {
		case a.Status == StatusPassed:
		case len(a.Messages) > 0:
			for _, m := range a.Messages {
				out = append(out, a.Name+": "+m)
			}
		default:
			out = append(out, a.Name+": "+a.Reason)
		}
	}
	return out
}

// Measurement is one measured quantity: a distribution (P50..Max over
// Samples) or a single Value when Samples is 1.
type Measurement struct {
	Feature string  `json:"feature"`
	Name    string  `json:"name"`
	Unit    string  `json:"unit"`
	Samples int     `json:"samples"`
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
}

// Key names a measurement across runs.
func (m Measurement) Key() string { return m.Feature + "/" + m.Name }

// Distribution summarises samples into a Measurement.
func Distribution(feature, name, unit string, samples []float64) Measurement {
	m := Measurement{Feature: feature, Name: name, Unit: unit, Samples: len(samples)}
	if len(samples) == 0 {
		return m
	}
	sorted := append([]float64(nil), samples...)
	sort.Float64s(sorted)
	m.P50 = Percentile(sorted, 50)
	m.P90 = Percentile(sorted, 90)
	m.P99 = Percentile(sorted, 99)
	m.Max = sorted[len(sorted)-1]
	return m
}

// Value is a single-number Measurement (every percentile equals it).
func Value(feature, name, unit string, v float64) Measurement {
	return Measurement{Feature: feature, Name: name, Unit: unit, Samples: 1, P50: v, P90: v, P99: v, Max: v}
}

// Percentile is the nearest-rank percentile p (0-100] of sorted samples.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted)) + 0.999999999)
	rank = max(rank, 1)
	rank = min(rank, len(sorted))
	return sorted[rank-1]
}

// Write finalizes the results and writes results.json, junit.xml,
// report.md and report.html into dir.
func (r *Results) Write(dir string) error {
	r.Finalize()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding results.json: %w", err)
	}
	junit, err := r.JUnit()
	if err != nil {
		return fmt.Errorf("rendering junit.xml: %w", err)
	}
	page, err := r.HTML()
	if err != nil {
		return fmt.Errorf("rendering report.html: %w", err)
	}
	product, err := r.ProductYAML()
	if err != nil {
		return err
	}
	for name, content := range map[string][]byte{
		"results.json": append(data, '\n'), "junit.xml": junit, "report.md": []byte(r.Markdown()), "report.html": page,
		ProductFile: product,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return fmt.Errorf("writing results: %w", err)
		}
	}
	return nil
}

// Read loads a results.json of this schema or of v1 (converted: each v1
// feature becomes one assessment, RequirementNone, with its verdict and
// messages), and finalizes it.
func Read(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var head struct {
		SchemaVersion string `json:"schemaVersion"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var r Results
	switch head.SchemaVersion {
	case SchemaVersion:
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	case SchemaVersionV1:
		if err := readV1(data, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("%s: schema %q, want %q (or %q)", path, head.SchemaVersion, SchemaVersion, SchemaVersionV1)
	}
	r.Finalize()
	return &r, nil
}

// V1Assessment names the one assessment a v1 feature becomes.
const V1Assessment = "all assessments (results v1)"

func readV1(data []byte, r *Results) error {
	var v1 struct {
		Results
		Features []struct {
			Name     string            `json:"name"`
			Labels   map[string]string `json:"labels,omitempty"`
			Passed   bool              `json:"passed"`
			Skipped  bool              `json:"skipped,omitempty"`
			Messages []string          `json:"messages,omitempty"`
			Seconds  float64           `json:"seconds"`
		} `json:"features"`
	}
	if err := json.Unmarshal(data, &v1); err != nil {
		return err
	}
	*r = v1.Results
	r.SchemaVersion = SchemaVersion
	r.Features = nil
	for _, f := range v1.Features {
		a := Assessment{Name: V1Assessment, Requirement: RequirementNone, Status: StatusPassed, Seconds: f.Seconds}
		switch {
		case !f.Passed:
			a.Status, a.Messages, a.Reason = StatusFailed, f.Messages, "failed (results v1)"
			if len(f.Messages) > 0 {
				a.Reason = f.Messages[0]
			}
		case f.Skipped:
			a.Status, a.Reason = StatusSkipped, "skipped (results v1)"
		}
		r.Features = append(r.Features, Feature{Name: f.Name, Labels: f.Labels, Seconds: f.Seconds, Assessments: []Assessment{a}})
	}
	return nil
}
