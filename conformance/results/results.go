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

// SchemaVersion identifies the results.json format.
const SchemaVersion = "conformance.gpulab.io/v1"

// Results is one run of the suite.
type Results struct {
	SchemaVersion string        `json:"schemaVersion"`
	StartTime     time.Time     `json:"startTime"`
	EndTime       time.Time     `json:"endTime"`
	Environment   Environment   `json:"environment"`
	Features      []Feature     `json:"features"`
	Measurements  []Measurement `json:"measurements"`
	// Timelines are per-cluster milestones of runs worth drawing (latency),
	// in seconds since the cluster's create; a missing milestone is -1.
	Timelines []Timeline `json:"timelines,omitempty"`
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
	Scale             int            `json:"scale"`
}

// Feature is one feature's verdict.
type Feature struct {
	Name     string            `json:"name"`
	Labels   map[string]string `json:"labels,omitempty"`
	Passed   bool              `json:"passed"`
	Skipped  bool              `json:"skipped,omitempty"`
	Messages []string          `json:"messages,omitempty"`
	Seconds  float64           `json:"seconds"`
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

// Passed says whether every feature that ran passed, and one did: a run
// whose setup failed, or that matched nothing, tested nothing.
func (r *Results) Passed() bool {
	if len(r.Features) == 0 {
		return false
	}
	for _, f := range r.Features {
		if !f.Passed && !f.Skipped {
			return false
		}
	}
	return true
}

// Write writes results.json, junit.xml, report.md and report.html into dir.
func (r *Results) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	junit, err := r.JUnit()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "junit.xml"), junit, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644); err != nil {
		return err
	}
	page, err := r.HTML()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), page, 0o644)
}

// Read loads a results.json, refusing other schema versions.
func Read(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("%s: schema %q, want %q", path, r.SchemaVersion, SchemaVersion)
	}
	return &r, nil
}
