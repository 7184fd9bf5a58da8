package results

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPromote(t *testing.T) {
	run := func(statuses ...Status) *Results {
		r := &Results{SchemaVersion: SchemaVersion, Measurements: []Measurement{Value("latency", "ready", "seconds", 1)},
			Timelines:       []Timeline{{Feature: "latency", Cluster: "c0", StatusReady: 2}},
			TimelineOrigins: map[string]time.Time{"latency": time.Unix(1, 0)}}
		for i, s := range statuses {
			name := []string{"gang", "latency", "inventory"}[i]
			r.Features = append(r.Features, Feature{Name: name, Assessments: []Assessment{{Name: "a", Status: s, Reason: "why"}}})
		}
		r.Finalize()
		return r
	}
	for _, tc := range []struct {
		name         string
		run          *Results
		allowPartial bool
		wantErr      []string // substrings of the error; nil for success
	}{
		{"passed", run(StatusPassed, StatusPassed), false, nil},
		{"failed names its features", run(StatusFailed, StatusPassed, StatusFailed), true, []string{"FAILED", "gang, inventory failed"}},
		{"partial refused", run(StatusPassed, StatusSkipped), false, []string{"PARTIAL", "latency"}},
		{"partial allowed", run(StatusPassed, StatusSkipped), true, nil},
		{"no features", run(), true, []string{"FAILED", "no features"}},
		{"nil run", nil, true, []string{"no run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, err := Promote(tc.run, PromoteOptions{AllowPartial: tc.allowPartial})
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("Promote accepted a run it must refuse: %+v", base)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if base.Timelines != nil || base.TimelineOrigins != nil || len(base.Measurements) != 1 || base.Verdict != tc.run.Verdict {
				t.Errorf("baseline %+v, want the run's verdict and measurements without timelines", base)
			}
			if len(tc.run.Timelines) != 1 {
				t.Errorf("Promote dropped the timelines of the run it copied")
			}
			base.Features[0].Assessments[0].Status = StatusFailed
			base.Measurements[0].P99 = 99
			if tc.run.Features[0].Assessments[0].Status != StatusPassed || tc.run.Measurements[0].P99 != 1 {
				t.Errorf("changing the baseline changed the run it came from")
			}
		})
	}
}

func TestPromoteNeedsMeasurements(t *testing.T) {
	r := &Results{Features: []Feature{passed("gang", "fits")}}
	if _, err := Promote(r, PromoteOptions{}); !errors.Is(err, ErrNoMeasurements) {
		t.Errorf("Promote of a run without measurements: %v, want ErrNoMeasurements", err)
	}
}

func TestPromoteRuns(t *testing.T) {
	run := func(status Status, change func(*Environment)) *Results {
		r := &Results{SchemaVersion: SchemaVersion, Environment: Environment{Profile: "local", Scale: 100, SuiteCommit: "abc1234"},
			Features:     []Feature{{Name: "gang", Assessments: []Assessment{{Name: "fits", Status: status, Reason: "why"}}}},
			Measurements: []Measurement{Value("latency", "ready", "seconds", 1)}}
		if change != nil {
			change(&r.Environment)
		}
		r.Finalize()
		return r
	}
	named := func(rs ...*Results) []Run {
		runs := Runs(rs...)
		for i := range runs {
			runs[i].Path = "nightly/run-" + string(rune('1'+i)) + "/results.json"
		}
		return runs
	}
	set, err := PromoteRuns(named(run(StatusPassed, nil), run(StatusPassed, nil), run(StatusPassed, nil)), PromoteOptions{})
	if err != nil || len(set) != 3 {
		t.Fatalf("three passed runs: %d promoted, %v", len(set), err)
	}
	for _, tc := range []struct {
		name string
		runs []Run
		opts PromoteOptions
		want []string // substrings of the error; nil for success
	}{
		{"a failed run is named", named(run(StatusPassed, nil), run(StatusFailed, nil)), PromoteOptions{}, []string{"nightly/run-2/results.json: the run is FAILED"}},
		{"a median is not a run", named(run(StatusPassed, nil), run(StatusPassed, func(e *Environment) { e.MergedRuns = 3 })), PromoteOptions{},
			[]string{"nightly/run-2/results.json: a median of 3 runs"}},
		{"runs that compare would refuse", named(run(StatusPassed, nil), run(StatusPassed, func(e *Environment) { e.Scale = 10 })), PromoteOptions{},
			[]string{"baseline runs differ in scale N: nightly/run-1/results.json 100, nightly/run-2/results.json 10"}},
		{"allowed to differ", named(run(StatusPassed, nil), run(StatusPassed, func(e *Environment) { e.Scale = 10 })), PromoteOptions{AllowDifferent: true}, nil},
		{"partial allowed", named(run(StatusPassed, nil), run(StatusSkipped, nil)), PromoteOptions{AllowPartial: true}, nil},
		{"none", nil, PromoteOptions{}, []string{"no runs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PromoteRuns(tc.runs, tc.opts)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("promoted")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func TestNewBaselineManifest(t *testing.T) {
	at := time.Date(2026, 12, 3, 4, 5, 6, 0, time.UTC)
	runs := Runs(&Results{Environment: Environment{SuiteCommit: "abc1234", OperatorCommit: "def5678"}, StartTime: at, Verdict: VerdictPassed},
		&Results{Environment: Environment{SuiteCommit: "abc1234"}})
	m := NewBaselineManifest(runs, []string{"run-1/results.json", "run-2/results.json"}, at.Add(time.Hour))
	if m.Commit != "abc1234" || !m.PromotedAt.Equal(at.Add(time.Hour)) || len(m.Runs) != 2 ||
		m.Runs[0] != (BaselineRun{Path: "run-1/results.json", From: "run 1", Verdict: VerdictPassed, StartTime: at, SuiteCommit: "abc1234", OperatorCommit: "def5678"}) {
		t.Errorf("manifest %+v", m)
	}
	runs[1].Environment.SuiteCommit = "fff0000"
	if m := NewBaselineManifest(runs, []string{"a", "b"}, at); m.Commit != "" {
		t.Errorf("runs of two commits recorded commit %q", m.Commit)
	}
}
