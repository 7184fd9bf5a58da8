package results

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
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
		Scale: 100, SchedulerVersion: "v1.15.1", Host: Host{CPUs: 2, CPUModel: "AMD EPYC", MemoryBytes: 8 << 30, Kernel: "6.8.0"},
	}}
	current := &Results{Environment: Environment{Profile: "local", Scale: 100, Scheduler: "kubernetes"}}
	var out bytes.Buffer
	PrintComparison(&out, Compare(baseline, current, CompareOptions{AllowMissing: true}))
	lines := strings.Split(out.String(), "\n")
	wantBaseline := "baseline: profile cluster, workload gpucluster, scale 100, cluster lab-a, suite v0.3.0 (commit abc1234), operator v0.2.9 (commit def5678), " +
		"scheduler volcano v1.15.1, host 2 CPUs (AMD EPYC), 8 GiB, kernel 6.8.0, started 2026-01-02T03:04:05Z"
	wantCurrent := "current:  profile local, workload gpucluster, scale 100, cluster unknown, suite unknown (commit unknown), operator unknown (commit unknown), " +
		"scheduler kubernetes, host not recorded, started unknown"
	if len(lines) < 2 || lines[0] != wantBaseline || lines[1] != wantCurrent {
		t.Errorf("header:\n%s\nwant:\n%s\n%s", out.String(), wantBaseline, wantCurrent)
	}
	// Compare of one run a side lists what differs instead of refusing.
	for _, want := range []string{
		"differs (compared anyway): profile: baseline cluster, current local",
		"differs (compared anyway): scheduler: baseline volcano, current kubernetes",
		"differs (compared anyway): host CPUs: baseline 2, current (not recorded)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestProvenanceOfSeveralRuns(t *testing.T) {
	at := func(h int) *Results {
		return &Results{StartTime: time.Date(2026, 1, 2, h, 0, 0, 0, time.UTC), Environment: Environment{Profile: "local"}}
	}
	p := provenance(Runs(at(3), at(1), at(2)))
	got := p.String()
	for _, want := range []string{"3 runs, profile local", "started 2026-01-02T01:00:00Z to 2026-01-02T03:00:00Z"} {
		if !strings.Contains(got, want) {
			t.Errorf("provenance %q lacks %q", got, want)
		}
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
// it rises; every other unit regresses when it grows. Each row says which
// way is better.
func TestCompareDirection(t *testing.T) {
	run := func(rate, ready float64) *Results {
		return &Results{Measurements: []Measurement{Value("latency", "gangs_per_second", "gangs/s", rate), Value("latency", "ready", "seconds", ready)}}
	}
	opts := CompareOptions{MinEffect: 0.10}
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
	// Across 3 runs a side, with an interval.
	side := func(rates ...float64) []Run {
		var rs []*Results
		for _, r := range rates {
			rs = append(rs, run(r, 5))
		}
		return Runs(rs...)
	}
	c, err := CompareRuns(side(10, 10.2, 9.9), side(5, 5.1, 4.9), CompareOptions{MinEffect: 0.15})
	if err != nil {
		t.Fatal(err)
	}
	rate := rowByKey(c)["latency/gangs_per_second"]
	if rate.Verdict != RowRegressed || !rate.HigherIsBetter || rate.Direction() != "higher" || rate.High >= 0 {
		t.Errorf("gangs/s halved over 3 runs: %+v, want regressed, higher is better, interval below 0", rate)
	}
	if ready := rowByKey(c)["latency/ready"]; ready.HigherIsBetter || ready.Direction() != "lower" {
		t.Errorf("seconds: %+v, want lower is better", ready)
	}
	c, _ = CompareRuns(side(10, 10.2, 9.9), side(20, 20.1, 19.8), CompareOptions{MinEffect: 0.15})
	if rate := rowByKey(c)["latency/gangs_per_second"]; rate.Verdict != RowImproved {
		t.Errorf("gangs/s doubled over 3 runs: %+v, want improved", rate)
	}
	var out bytes.Buffer
	PrintComparison(&out, c)
	if !regexp.MustCompile(`latency/gangs_per_second\s+gangs/s\s+higher\s+3/3`).MatchString(out.String()) ||
		!regexp.MustCompile(`latency/ready\s+seconds\s+lower\s+3/3`).MatchString(out.String()) {
		t.Errorf("the table does not give each row's direction and runs:\n%s", out.String())
	}
}

func rowByKey(c Comparison) map[string]Row {
	out := map[string]Row{}
	for _, r := range c.Rows {
		out[r.Key] = r
	}
	return out
}

// side is runs of one measurement, latency/ready in seconds, one run per
// value, all on one host.
func side(values ...float64) []Run {
	var rs []*Results
	for _, v := range values {
		rs = append(rs, &Results{Environment: Environment{Profile: "local", Scale: 100, Host: Host{CPUs: 2, CPUModel: "AMD EPYC", MemoryBytes: 8 << 30}},
			Measurements: []Measurement{Value("latency", "ready", "seconds", v)}})
	}
	return Runs(rs...)
}

// TestCompareRunsVerdicts: a regression is a significant change (the
// interval wholly above 0) of at least the minimum effect.
func TestCompareRunsVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name              string
		baseline, current []float64
		opts              CompareOptions
		want              RowVerdict
		wantInterval      string // a substring of Row.Interval()
		wantFailed        bool
	}{
		{
			name:     "a clear +50% over 3 runs a side with little noise",
			baseline: []float64{10, 10.2, 9.9}, current: []float64{15, 15.3, 14.8},
			opts: CompareOptions{MinEffect: 0.15}, want: RowRegressed, wantInterval: "[+45.1%, +54.5%]", wantFailed: true,
		},
		{
			name:     "+50% within noisy runs: the interval crosses 0",
			baseline: []float64{10, 6, 14}, current: []float64{15, 9, 21},
			opts: CompareOptions{MinEffect: 0.15}, want: RowNotSignificant, wantInterval: "[-35.7%, +250.0%]",
		},
		{
			name:     "a significant +10% is below the minimum effect",
			baseline: []float64{10, 10.1, 9.9}, current: []float64{11, 11.1, 10.9},
			opts: CompareOptions{MinEffect: 0.15}, want: RowUnchanged, wantInterval: "[+7.9%, +12.1%]",
		},
		{
			name:     "the same +10% with a per-measurement minimum effect of 5%",
			baseline: []float64{10, 10.1, 9.9}, current: []float64{11, 11.1, 10.9},
			opts: CompareOptions{MinEffect: 0.15, MinEffectFor: map[string]float64{"latency/ready": 0.05}}, want: RowRegressed, wantFailed: true,
		},
		{
			name:     "the clear +50% with a per-measurement minimum effect of 60%",
			baseline: []float64{10, 10.2, 9.9}, current: []float64{15, 15.3, 14.8},
			opts: CompareOptions{MinEffect: 0.15, MinEffectFor: map[string]float64{"latency/ready": 0.60, "latency/other": 0}}, want: RowUnchanged,
		},
		{
			name:     "a clear -50%",
			baseline: []float64{10, 10.2, 9.9}, current: []float64{5, 5.1, 4.9},
			opts: CompareOptions{MinEffect: 0.15}, want: RowImproved,
		},
		{
			name:     "one run a side: the change alone decides",
			baseline: []float64{10}, current: []float64{15},
			opts: CompareOptions{MinEffect: 0.15}, want: RowRegressed, wantInterval: "no interval (1 run a side)", wantFailed: true,
		},
		{
			name:     "one run a side, below the minimum effect",
			baseline: []float64{10}, current: []float64{11},
			opts: CompareOptions{MinEffect: 0.15}, want: RowUnchanged, wantInterval: "no interval (1 run a side)",
		},
		{
			name:     "one baseline run against three",
			baseline: []float64{10}, current: []float64{15, 16, 14},
			opts: CompareOptions{MinEffect: 0.15}, want: RowRegressed, wantInterval: "no interval (1 baseline run)", wantFailed: true,
		},
		{
			name:     "the clear +50% of a measurement the gate leaves out: shown, not failing",
			baseline: []float64{10, 10.2, 9.9}, current: []float64{15, 15.3, 14.8},
			opts: CompareOptions{MinEffect: 0.15, Gate: regexp.MustCompile(`^latency/other$`)}, want: RowRegressed,
		},
		{
			name:     "the clear +50% of a gated measurement",
			baseline: []float64{10, 10.2, 9.9}, current: []float64{15, 15.3, 14.8},
			opts: CompareOptions{MinEffect: 0.15, Gate: regexp.MustCompile(`^latency/ready$`)}, want: RowRegressed, wantFailed: true,
		},
		{
			name:     "a clear +50% within the noise floor",
			baseline: []float64{0.010, 0.0102, 0.0099}, current: []float64{0.015, 0.0153, 0.0148},
			opts: CompareOptions{MinEffect: 0.15, NoiseSeconds: 0.05}, want: RowUnchanged,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := CompareRuns(side(tc.baseline...), side(tc.current...), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			r := rowByKey(c)["latency/ready"]
			if r.Verdict != tc.want || r.Regressed != (tc.want == RowRegressed) {
				t.Errorf("verdict %q (regressed %v), want %q: %+v", r.Verdict, r.Regressed, tc.want, r)
			}
			if !strings.Contains(r.Interval(), tc.wantInterval) {
				t.Errorf("interval %q, want %q", r.Interval(), tc.wantInterval)
			}
			if r.BaselineRuns != len(tc.baseline) || r.CurrentRuns != len(tc.current) {
				t.Errorf("runs %d/%d, want %d/%d", r.BaselineRuns, r.CurrentRuns, len(tc.baseline), len(tc.current))
			}
			var out bytes.Buffer
			if got := PrintComparison(&out, c); got != tc.wantFailed {
				t.Errorf("PrintComparison = %v, want %v:\n%s", got, tc.wantFailed, out.String())
			}
			if !strings.Contains(out.String(), r.Interval()) {
				t.Errorf("the table lacks the interval %q:\n%s", r.Interval(), out.String())
			}
		})
	}
}

// TestComparisonStatesTheTest: the output says what was compared and how.
func TestComparisonStatesTheTest(t *testing.T) {
	c, err := CompareRuns(side(10, 10.2, 9.9), side(15, 15.3, 14.8), CompareOptions{MinEffect: 0.15, Statistic: "p50", Bootstrap: BootstrapOptions{Confidence: 0.9}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	PrintComparison(&out, c)
	for _, want := range []string{
		"test:     each run's p50;", "90% percentile bootstrap interval", "10000 resamples, seed 1",
		"BASELINE p50", "90% INTERVAL", "MIN EFFECT", "15%", "REGRESSION", "comparison: FAILED (1 regressed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := CompareRuns(side(1), side(1), CompareOptions{Statistic: "p95"}); err == nil || !strings.Contains(err.Error(), "p95") {
		t.Errorf("an unknown statistic: %v", err)
	}
}

// TestCompareRunsStatistic: the compared value is each run's statistic,
// p99 unless told otherwise.
func TestCompareRunsStatistic(t *testing.T) {
	run := func(p50, p99 float64) *Results {
		return &Results{Measurements: []Measurement{{Feature: "latency", Name: "ready", Unit: "seconds", Samples: 100, P50: p50, P90: p50, P99: p99, Max: p99}}}
	}
	base, cur := Runs(run(1, 10), run(1.01, 10.1), run(0.99, 9.9)), Runs(run(1, 20), run(1.01, 20.2), run(0.99, 19.8))
	c, _ := CompareRuns(base, cur, CompareOptions{MinEffect: 0.15})
	if r := rowByKey(c)["latency/ready"]; r.Verdict != RowRegressed || r.Baseline != 10 || r.Current != 20 {
		t.Errorf("p99 doubled: %+v, want regressed 10 → 20", r)
	}
	c, _ = CompareRuns(base, cur, CompareOptions{MinEffect: 0.15, Statistic: "p50"})
	if r := rowByKey(c)["latency/ready"]; r.Verdict != RowUnchanged || r.Baseline != 1 {
		t.Errorf("p50 held: %+v, want unchanged", r)
	}
}

// TestCompareRunsRefusesDifferentRuns: runs of another scale, workload,
// profile, scheduler or host class are not compared unless allowed, and
// the refusal names each field with both values.
func TestCompareRunsRefusesDifferentRuns(t *testing.T) {
	host := Host{CPUs: 2, CPUModel: "AMD EPYC", MemoryBytes: 8 << 30, Kernel: "6.8.0"}
	run := func(change func(*Environment)) *Results {
		r := &Results{Environment: Environment{Profile: "local", Scale: 100, Host: host}, Measurements: []Measurement{Value("latency", "ready", "seconds", 1)}}
		if change != nil {
			change(&r.Environment)
		}
		return r
	}
	for _, tc := range []struct {
		name              string
		baseline, current []*Results
		want              []string // the differences, as printed; nil: comparable
	}{
		{"alike", []*Results{run(nil), run(nil)}, []*Results{run(nil)}, nil},
		{
			"kernel, versions and cluster may change",
			[]*Results{run(nil)},
			[]*Results{run(func(e *Environment) {
				e.Host.Kernel, e.KubernetesVersion, e.VolcanoVersion, e.SchedulerVersion, e.ClusterName = "6.9.1", "v1.38.0", "v1.15.1", "v1.15.1", "other"
				e.Host.MemoryBytes += 100 << 20 // the same GiB
			})},
			nil,
		},
		{"scale N", []*Results{run(nil)}, []*Results{run(func(e *Environment) { e.Scale = 50 })}, []string{"scale N: baseline 100, current 50"}},
		{
			"workload, profile and scheduler",
			[]*Results{run(nil)},
			[]*Results{run(func(e *Environment) { e.Workload, e.Profile, e.Scheduler = "raycluster", "kind", "kubernetes" })},
			[]string{"profile: baseline local, current kind", "workload: baseline gpucluster, current raycluster", "scheduler: baseline volcano, current kubernetes"},
		},
		{
			"host class",
			[]*Results{run(nil)},
			[]*Results{run(func(e *Environment) { e.Host = Host{CPUs: 16, CPUModel: "Intel Xeon", MemoryBytes: 64 << 30} })},
			[]string{"host CPUs: baseline 2, current 16", "host CPU model: baseline AMD EPYC, current Intel Xeon", "host memory: baseline 8 GiB, current 64 GiB"},
		},
		{
			"runs within the current side differ",
			[]*Results{run(nil)},
			[]*Results{run(nil), run(nil), run(func(e *Environment) { e.Workload = "vcjob" })},
			[]string{"current runs differ in workload: run 1 gpucluster, run 3 vcjob"},
		},
		{
			"runs within the baseline differ",
			[]*Results{run(nil), run(func(e *Environment) { e.Scale = 10 })},
			[]*Results{run(nil)},
			[]string{"baseline runs differ in scale N: run 1 100, run 2 10"},
		},
		{
			"a host recorded against one not recorded (results from before host fields)",
			[]*Results{run(func(e *Environment) { e.Host = Host{} })},
			[]*Results{run(nil)},
			[]string{"host CPUs: baseline (not recorded), current 2", "host CPU model: baseline (not recorded), current AMD EPYC"},
		},
		{
			"two hosts not recorded are alike",
			[]*Results{run(func(e *Environment) { e.Host = Host{} })},
			[]*Results{run(func(e *Environment) { e.Host = Host{} })},
			nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CompareRuns(Runs(tc.baseline...), Runs(tc.current...), CompareOptions{})
			var incomparable *IncomparableError
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &incomparable) {
				t.Fatalf("error %v, want an *IncomparableError", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal lacks %q:\n%v", want, err)
				}
			}
			c, err := CompareRuns(Runs(tc.baseline...), Runs(tc.current...), CompareOptions{AllowDifferent: true})
			if err != nil {
				t.Fatalf("AllowDifferent still refused: %v", err)
			}
			var out bytes.Buffer
			PrintComparison(&out, c)
			for _, want := range tc.want {
				if !strings.Contains(out.String(), "differs (compared anyway): "+want) {
					t.Errorf("output lacks the allowed difference %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestCompareRunsFeaturesOverRuns: a feature failed in any current run
// fails the comparison; one missing from every current run is missing.
func TestCompareRunsFeaturesOverRuns(t *testing.T) {
	ok := &Results{Features: []Feature{passed("gang", "fits"), passed("latency", "ready")}}
	bad := &Results{Features: []Feature{{Name: "gang", Assessments: []Assessment{{Name: "fits", Status: StatusFailed, Reason: "2 pods bound"}}}, passed("latency", "ready")}}
	onlyGang := &Results{Features: []Feature{passed("gang", "fits")}}
	c, err := CompareRuns(Runs(ok, ok), Runs(ok, bad, ok), CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.FailedFeatures() != 1 || !c.Failed() {
		t.Errorf("a feature failed in one current run: %+v, want the comparison failed", c.NotPassed)
	}
	c, _ = CompareRuns(Runs(ok), Runs(onlyGang, onlyGang), CompareOptions{})
	if !reflect.DeepEqual(c.MissingFeatures, []string{"latency"}) {
		t.Errorf("missing features %v, want latency", c.MissingFeatures)
	}
}

func TestMedianRecordsMergedRuns(t *testing.T) {
	runs := []*Results{{}, {}, {Environment: Environment{MergedRuns: 3}}}
	if got := Median(runs[:2]).Environment.MergedRuns; got != 2 {
		t.Errorf("median of 2 runs records %d merged, want 2", got)
	}
	if got := Median(runs).Environment.MergedRuns; got != 5 {
		t.Errorf("median of 2 runs and a median of 3 records %d merged, want 5", got)
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
