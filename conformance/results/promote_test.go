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
