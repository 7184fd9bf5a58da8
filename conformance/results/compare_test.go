package results

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func passed(name string, assessments ...string) Feature {
	f := Feature{Name: name}
	for _, a := range assessments {
		f.Assessments = append(f.Assessments, Assessment{Name: a, Requirement: RequirementNone, Status: StatusPassed})
	}
	return f
}

func TestCompareMissing(t *testing.T) {
	baseline := &Results{
		Features: []Feature{passed("gang", "fits", "too-big"), passed("latency", "ready")},
		Measurements: []Measurement{
			Value("latency", "ready", "seconds", 2), Value("latency", "requests", "requests", 10),
		},
	}
	for _, tc := range []struct {
		name         string
		current      *Results
		allowMissing bool
		wantFailed   bool
		// wantMissing are the measurement keys, features and assessments
		// (prefixed m:, f: and a:) the comparison must name as missing.
		wantMissing []string
		wantOutput  []string
	}{
		{
			name: "everything there",
			current: &Results{Features: []Feature{passed("gang", "fits", "too-big"), passed("latency", "ready")},
				Measurements: []Measurement{Value("latency", "ready", "seconds", 2), Value("latency", "requests", "requests", 10)}},
			wantOutput: []string{"comparison: ok"},
		},
		{
			name: "measurement missing",
			current: &Results{Features: []Feature{passed("gang", "fits", "too-big"), passed("latency", "ready")},
				Measurements: []Measurement{Value("latency", "ready", "seconds", 2)}},
			wantFailed: true, wantMissing: []string{"m:latency/requests"},
			wantOutput: []string{"latency/requests", "MISSING", "comparison: FAILED (0 regressed, 1 missing, 0 failed features)"},
		},
		{
			name: "feature missing",
			current: &Results{Features: []Feature{passed("latency", "ready")},
				Measurements: []Measurement{Value("latency", "ready", "seconds", 2), Value("latency", "requests", "requests", 10)}},
			wantFailed: true, wantMissing: []string{"f:gang"},
			wantOutput: []string{"feature gang: MISSING"},
		},
		{
			name: "assessment missing",
			current: &Results{Features: []Feature{passed("gang", "fits"), passed("latency", "ready")},
				Measurements: []Measurement{Value("latency", "ready", "seconds", 2), Value("latency", "requests", "requests", 10)}},
			wantFailed: true, wantMissing: []string{"a:gang/too-big"},
			wantOutput: []string{"assessment gang/too-big: MISSING"},
		},
		{
			name:         "all missing, allowed",
			current:      &Results{Features: []Feature{passed("latency")}},
			allowMissing: true,
			wantMissing:  []string{"m:latency/ready", "m:latency/requests", "f:gang", "a:latency/ready"},
			wantOutput:   []string{"feature gang: missing (allowed)", "assessment latency/ready: missing (allowed)", "comparison: ok"},
		},
		{
			name:         "allowed missing does not hide a regression",
			current:      &Results{Features: []Feature{passed("latency", "ready")}, Measurements: []Measurement{Value("latency", "ready", "seconds", 3)}},
			allowMissing: true, wantFailed: true,
			wantMissing: []string{"m:latency/requests", "f:gang"},
			wantOutput:  []string{"REGRESSION", "comparison: FAILED (1 regressed, 2 missing (allowed), 0 failed features)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(baseline, tc.current, CompareOptions{MaxRegression: 0.10, NoiseSeconds: 0.05, NoiseCount: 1, AllowMissing: tc.allowMissing})
			var missing []string
			for _, r := range c.Rows {
				if r.Missing {
					missing = append(missing, "m:"+r.Key)
				}
			}
			for _, f := range c.MissingFeatures {
				missing = append(missing, "f:"+f)
			}
			for _, a := range c.MissingAssessments {
				missing = append(missing, "a:"+a)
			}
			if !reflect.DeepEqual(missing, tc.wantMissing) {
				t.Errorf("missing %q, want %q", missing, tc.wantMissing)
			}
			if c.Failed() != tc.wantFailed {
				t.Errorf("Failed() = %v, want %v", c.Failed(), tc.wantFailed)
			}
			var out bytes.Buffer
			if got := PrintComparison(&out, c); got != tc.wantFailed {
				t.Errorf("PrintComparison = %v, want %v", got, tc.wantFailed)
			}
			for _, want := range tc.wantOutput {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// A failed feature fails the comparison even with every measurement held;
// a partial one is named but leaves the decision to the run's exit code.
func TestCompareNotPassedFeatures(t *testing.T) {
	baseline := &Results{Features: []Feature{passed("gang", "fits"), passed("latency", "ready")}}
	for _, tc := range []struct {
		name       string
		status     Status
		wantFailed bool
		wantLine   string
	}{
		{"failed", StatusFailed, true, "feature gang failed: fits: 2 pods bound"},
		{"partial", StatusSkipped, false, "feature gang partial: fits: 2 pods bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gang := Feature{Name: "gang", Assessments: []Assessment{{Name: "fits", Status: tc.status, Reason: "2 pods bound"}}}
			c := Compare(baseline, &Results{Features: []Feature{gang, passed("latency", "ready")}}, CompareOptions{})
			var out bytes.Buffer
			if got := PrintComparison(&out, c); got != tc.wantFailed {
				t.Errorf("PrintComparison = %v, want %v\n%s", got, tc.wantFailed, out.String())
			}
			if !strings.Contains(out.String(), tc.wantLine) {
				t.Errorf("output lacks %q:\n%s", tc.wantLine, out.String())
			}
			if strings.Contains(out.String(), "feature latency") {
				t.Errorf("a passed feature is named:\n%s", out.String())
			}
		})
	}
}

func TestComparisonNamesBothSides(t *testing.T) {
	baseline := &Results{StartTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Environment: Environment{
		Profile: "cluster", ClusterName: "lab-a", SuiteVersion: "v0.3.0", SuiteCommit: "abc1234", OperatorVersion: "v0.2.9", OperatorCommit: "def5678",
	}}
	current := &Results{Environment: Environment{Profile: "local"}}
	var out bytes.Buffer
	PrintComparison(&out, Compare(baseline, current, CompareOptions{AllowMissing: true}))
	lines := strings.Split(out.String(), "\n")
	wantBaseline := "baseline: profile cluster, workload gpucluster, cluster lab-a, suite v0.3.0 (commit abc1234), operator v0.2.9 (commit def5678), started 2026-01-02T03:04:05Z"
	wantCurrent := "current:  profile local, workload gpucluster, cluster unknown, suite unknown (commit unknown), operator unknown (commit unknown), started unknown"
	if len(lines) < 2 || lines[0] != wantBaseline || lines[1] != wantCurrent {
		t.Errorf("header:\n%s\nwant:\n%s\n%s", out.String(), wantBaseline, wantCurrent)
	}
}

// A v1 baseline has features without assessment names: its features are
// compared, its synthesized assessment is not.
func TestCompareV1Baseline(t *testing.T) {
	baseline := &Results{Features: []Feature{passed("gang", V1Assessment), passed("latency", V1Assessment)}}
	current := &Results{Features: []Feature{passed("gang", "fits")}}
	c := Compare(baseline, current, CompareOptions{})
	if !reflect.DeepEqual(c.MissingFeatures, []string{"latency"}) || len(c.MissingAssessments) != 0 {
		t.Errorf("missing features %v, assessments %v; want latency only", c.MissingFeatures, c.MissingAssessments)
	}
}

// TestCompareDirection: a rate (gangs/s) regresses when it falls, not when
// it rises; every other unit regresses when it grows.
func TestCompareDirection(t *testing.T) {
	run := func(rate, ready float64) *Results {
		return &Results{Measurements: []Measurement{Value("latency", "gangs_per_second", "gangs/s", rate), Value("latency", "ready", "seconds", ready)}}
	}
	opts := CompareOptions{MaxRegression: 0.10}
	regressed := func(c Comparison) map[string]bool {
		out := map[string]bool{}
		for _, r := range c.Rows {
			out[r.Key] = r.Regressed
		}
		return out
	}
	if got := regressed(Compare(run(10, 5), run(5, 5), opts)); !got["latency/gangs_per_second"] || got["latency/ready"] {
		t.Errorf("gangs/s halved: %v, want gangs_per_second regressed", got)
	}
	if got := regressed(Compare(run(10, 5), run(20, 5), opts)); got["latency/gangs_per_second"] {
		t.Errorf("gangs/s doubled: %v, want no regression", got)
	}
	if got := regressed(Compare(run(10, 5), run(10, 10), opts)); !got["latency/ready"] {
		t.Errorf("ready time doubled: %v, want it regressed", got)
	}
}

// TestMedianOfEvenCounts: the median of two or four runs is the mean of
// the two middle values, not the lower one.
func TestMedianOfEvenCounts(t *testing.T) {
	var runs []*Results
	for _, v := range []float64{4, 1, 3, 2} {
		runs = append(runs, &Results{Measurements: []Measurement{Value("latency", "ready", "seconds", v)}})
	}
	if got := Median(runs).Measurements[0].P99; got != 2.5 {
		t.Errorf("median of 1, 2, 3, 4 = %v, want 2.5", got)
	}
	if got := Median(runs[:3]).Measurements[0].P99; got != 3 {
		t.Errorf("median of 4, 1, 3 = %v, want 3", got)
	}
}
