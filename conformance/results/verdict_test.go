package results

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// every sequence of up to three assessment outcomes, an unknown one
// included (it must count as a failure, never as a pass).
func outcomeSequences() [][]Status {
	all := []Status{StatusPassed, StatusSkipped, StatusFailed, "bogus"}
	seqs := [][]Status{nil}
	prev := [][]Status{nil}
	for range 3 {
		var next [][]Status
		for _, p := range prev {
			for _, s := range all {
				next = append(next, append(append([]Status(nil), p...), s))
			}
		}
		seqs = append(seqs, next...)
		prev = next
	}
	return seqs
}

func assessments(seq []Status) []Assessment {
	as := make([]Assessment, len(seq))
	for i, s := range seq {
		as[i] = Assessment{Name: string(s), Status: s}
	}
	return as
}

func count(seq []Status) (passed, skipped, other int) {
	for _, s := range seq {
		switch s {
		case StatusPassed:
			passed++
		case StatusSkipped:
			skipped++
		default:
			other++
		}
	}
	return passed, skipped, other
}

// A feature passes only if every assessment passed; a skip and no failure
// is partial; any failure fails it; no assessment at all is not a pass.
func TestFeatureStatusEveryCombination(t *testing.T) {
	for _, seq := range outcomeSequences() {
		passed, skipped, failed := count(seq)
		want := StatusPassed
		switch {
		case failed > 0:
			want = StatusFailed
		case skipped > 0 || passed == 0:
			want = StatusPartial
		}
		if got := FeatureStatus(assessments(seq)); got != want {
			t.Errorf("FeatureStatus(%v) = %s, want %s", seq, got, want)
		}
		// A requirement follows the same rules, but nothing is "not tested".
		if len(seq) == 0 {
			want = StatusNotTested
		}
		if got := RequirementStatus(assessments(seq)); got != want {
			t.Errorf("RequirementStatus(%v) = %s, want %s", seq, got, want)
		}
	}
}

// The run is PASSED only if every feature passed, FAILED if any failed,
// PARTIAL otherwise; a run with no feature is FAILED. Each feature is
// judged from its assessments, whatever its stored status says.
func TestRunVerdictEveryCombination(t *testing.T) {
	feature := map[Status][]Assessment{
		StatusPassed:  {{Name: "a", Status: StatusPassed}},
		StatusPartial: {{Name: "a", Status: StatusPassed}, {Name: "b", Status: StatusSkipped}},
		StatusFailed:  {{Name: "a", Status: StatusFailed}, {Name: "b", Status: StatusSkipped}},
	}
	kinds := []Status{StatusPassed, StatusPartial, StatusFailed}
	var check func(prefix []Status)
	check = func(prefix []Status) {
		var fs []Feature
		failed, partial := false, false
		for _, k := range prefix {
			// A stale stored status must not decide the verdict.
			fs = append(fs, Feature{Name: string(k), Status: StatusPassed, Assessments: feature[k]})
			failed = failed || k == StatusFailed
			partial = partial || k == StatusPartial
		}
		want := VerdictPassed
		switch {
		case len(fs) == 0 || failed:
			want = VerdictFailed
		case partial:
			want = VerdictPartial
		}
		if got := RunVerdict(fs); got != want {
			t.Errorf("RunVerdict(%v) = %s, want %s", prefix, got, want)
		}
		if len(prefix) < 3 {
			for _, k := range kinds {
				check(append(append([]Status(nil), prefix...), k))
			}
		}
	}
	check(nil)
}

func TestExitCodes(t *testing.T) {
	for v, want := range map[Verdict]int{VerdictPassed: 0, VerdictFailed: 1, VerdictPartial: 3, "": 1, "bogus": 1} {
		if got := ExitCode(v); got != want {
			t.Errorf("ExitCode(%q) = %d, want %d", v, got, want)
		}
	}
	if ExitUsage != 2 {
		t.Errorf("bad usage exits %d, want 2", ExitUsage)
	}
}

// sample is a run with a pass, a skip and a failure across requirements.
func sample() *Results {
	return &Results{SchemaVersion: SchemaVersion, Environment: Environment{Profile: "local"}, Features: []Feature{
		{Name: "gang", Assessments: []Assessment{
			{Name: "fits", Requirement: RequirementGangScheduling, Status: StatusPassed, Seconds: 2},
			{Name: "contention", Requirement: RequirementGangScheduling, Status: StatusSkipped, Reason: "needs at least 2 free 8-GPU nodes, found 1", Seconds: 0.1},
		}},
		{Name: "controller", Assessments: []Assessment{
			{Name: "valid", Requirement: RequirementRobustController, Status: StatusPassed, Seconds: 3},
			{Name: "failover", Requirement: RequirementRobustController, Status: StatusFailed, Reason: "duplicate pod c-1",
				Messages: []string{"duplicate pod c-1", "7 pods after recovery, want 6"}, Seconds: 9},
		}},
		{Name: "inventory", Assessments: []Assessment{
			{Name: "series", Requirement: RequirementAcceleratorMetrics, Status: StatusPassed, Seconds: 1},
			{Name: "agrees", Requirement: RequirementNone, Status: StatusPassed, Seconds: 1},
		}},
	}}
}

func TestKAREvidence(t *testing.T) {
	ev := KAREvidence(sample().Features)
	want := map[Requirement]struct {
		status Status
		kar    string
		n      int
	}{
		RequirementGangScheduling:          {StatusPartial, "KAR-0053", 2},
		RequirementAcceleratorMetrics:      {StatusPassed, "KAR-0059", 1},
		RequirementRobustController:        {StatusFailed, "KAR-0063", 2},
		RequirementSecureAcceleratorAccess: {StatusNotTested, "", 0},
		RequirementDRASupport:              {StatusNotTested, "KAR-0051", 0},
		RequirementClusterAutoscaling:      {StatusNotTested, "KAR-0055", 0},
	}
	if len(ev) != len(want) {
		t.Fatalf("%d requirements, want %d (none is not one): %+v", len(ev), len(want), ev)
	}
	for _, e := range ev {
		w := want[e.Requirement]
		if e.Status != w.status || e.KAR != w.kar || len(e.Assessments) != w.n {
			t.Errorf("%s: %+v, want %s %s with %d assessments", e.Requirement, e, w.status, w.kar, w.n)
		}
	}
	if got := ev[0].Assessments; got[0] != "gang/fits: passed" || got[1] != "gang/contention: skipped" {
		t.Errorf("gang_scheduling evidence %v", got)
	}
	for _, r := range []Requirement{RequirementGangScheduling, RequirementNone, RequirementSecureAcceleratorAccess} {
		if !KnownRequirement(r) {
			t.Errorf("%s unknown", r)
		}
	}
	if KnownRequirement("gang") {
		t.Error("a typo passed for a requirement")
	}
}

// junit.xml has a case per assessment, the feature as its class, real
// skip and failure elements with their messages.
func TestJUnitSkipsAndFailures(t *testing.T) {
	data, err := sample().JUnit()
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Skipped  int `xml:"skipped,attr"`
		Cases    []struct {
			Name    string `xml:"name,attr"`
			Class   string `xml:"classname,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	}
	if err := xml.Unmarshal(data, &suite); err != nil {
		t.Fatal(err)
	}
	if suite.Tests != 6 || suite.Failures != 1 || suite.Skipped != 1 || len(suite.Cases) != 6 {
		t.Fatalf("suite counts: %d tests, %d failures, %d skipped, %d cases\n%s", suite.Tests, suite.Failures, suite.Skipped, len(suite.Cases), data)
	}
	for _, c := range suite.Cases {
		switch c.Name {
		case "contention":
			if c.Class != "gang" || c.Skipped == nil || c.Skipped.Message != "needs at least 2 free 8-GPU nodes, found 1" || c.Failure != nil {
				t.Errorf("skipped case %+v", c)
			}
		case "failover":
			if c.Class != "controller" || c.Failure == nil || c.Failure.Message != "duplicate pod c-1" ||
				c.Failure.Text != "duplicate pod c-1\n7 pods after recovery, want 6" || c.Skipped != nil {
				t.Errorf("failed case %+v", c)
			}
		default:
			if c.Skipped != nil || c.Failure != nil {
				t.Errorf("passed case %s has a skip or a failure", c.Name)
			}
		}
	}
}

// Both reports lead with the verdict and carry the KAR evidence and every
// assessment's reason.
func TestReportsShowVerdictAndEvidence(t *testing.T) {
	r := sample()
	r.Features = r.Features[:1] // gang only: partial
	r.Finalize()
	if r.Verdict != VerdictPartial {
		t.Fatalf("verdict %s, want PARTIAL", r.Verdict)
	}
	md := r.Markdown()
	if !strings.HasPrefix(md, "# gpulab conformance: PARTIAL\n") {
		t.Errorf("markdown does not start with the verdict:\n%s", md)
	}
	for _, want := range []string{
		"| | contention | gang_scheduling | *skipped* | 0.1 | needs at least 2 free 8-GPU nodes, found 1 |",
		"| **gang** | | | *partial* |",
		"## KAR evidence",
		"| gang_scheduling | KAR-0053 | *partial* | gang/fits: passed; gang/contention: skipped |",
		"| secure_accelerator_access | - | not tested |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	page, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<title>gpulab conformance: PARTIAL</title>", `<span class="partial">PARTIAL</span>`, "<h2>KAR evidence</h2>",
		"needs at least 2 free 8-GPU nodes, found 1", "not tested", "KAR-0053"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	failed := sample()
	if md := failed.Markdown(); !strings.HasPrefix(md, "# gpulab conformance: FAILED\n") || !strings.Contains(md, "duplicate pod c-1; 7 pods after recovery, want 6") {
		t.Errorf("a failed run's markdown:\n%s", md)
	}
}

// A setup failure is a feature like any other: FAILED with its message.
func TestSetupFailureIsFailed(t *testing.T) {
	r := &Results{SchemaVersion: SchemaVersion, Features: []Feature{{Name: "setup", Assessments: []Assessment{
		{Name: "setup", Requirement: RequirementNone, Status: StatusFailed, Reason: "profile local: port taken", Messages: []string{"profile local: port taken"}},
	}}}}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Verdict != VerdictFailed || back.Features[0].Status != StatusFailed || ExitCode(back.Verdict) != 1 ||
		!strings.Contains(back.Markdown(), "profile local: port taken") {
		t.Errorf("setup failure read back as %s:\n%s", back.Verdict, back.Markdown())
	}
}

// v1 results (the checked-in baseline) are still read, each feature one
// assessment; other schemas are refused by name.
func TestReadV1(t *testing.T) {
	r, err := Read(filepath.Join("testdata", "v1-run.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.SchemaVersion != SchemaVersion || len(r.Features) == 0 || len(r.Measurements) == 0 || r.Verdict != VerdictPassed {
		t.Fatalf("baseline read as %+v", r)
	}
	for _, f := range r.Features {
		if len(f.Assessments) != 1 || f.Assessments[0].Name != V1Assessment || f.Status != StatusPassed {
			t.Errorf("v1 feature %s became %+v", f.Name, f)
		}
	}
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1.json")
	if err := os.WriteFile(v1, []byte(`{"schemaVersion":"conformance.gpulab.io/v1","features":[
		{"name":"gang","passed":false,"messages":["partly bound"]},{"name":"job","passed":true,"skipped":true}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = Read(v1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Features[0].Status != StatusFailed || r.Features[0].Assessments[0].Reason != "partly bound" || r.Features[1].Status != StatusPartial || r.Verdict != VerdictFailed {
		t.Errorf("v1 verdicts converted to %+v", r.Features)
	}
	v3 := filepath.Join(dir, "v3.json")
	if err := os.WriteFile(v3, []byte(`{"schemaVersion":"conformance.gpulab.io/v3"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(v3); err == nil || !strings.Contains(err.Error(), `schema "conformance.gpulab.io/v3"`) {
		t.Errorf("an unknown schema read: %v", err)
	}
}

// TestRunStoppedFails: a run cut short by --timeout is FAILED (exit 1)
// even when everything it did run passed, and says why under "run".
func TestRunStoppedFails(t *testing.T) {
	r := &Results{Features: []Feature{
		{Name: "gang", Assessments: []Assessment{{Name: "fits", Requirement: RequirementGangScheduling, Status: StatusPassed}}},
		RunStopped("the run finished within --timeout", "--timeout=1m0s passed before the run finished"),
	}}
	r.Finalize()
	if r.Verdict != VerdictFailed || ExitCode(r.Verdict) != ExitFailed {
		t.Errorf("verdict %s (exit %d), want FAILED (exit 1)", r.Verdict, ExitCode(r.Verdict))
	}
	if f := r.Features[1]; f.Name != RunFeature || f.Status != StatusFailed || f.Assessments[0].Reason != "--timeout=1m0s passed before the run finished" {
		t.Errorf("run entry %+v", f)
	}
}

// TestRequestedRequirementNotTestedIsPartial: a run whose features all
// passed but that evidences nothing of a requirement it was asked for is
// PARTIAL; one it was not asked for leaves it PASSED; a failure stays FAILED.
func TestRequestedRequirementNotTestedIsPartial(t *testing.T) {
	fs := []Feature{{Name: "gang", Assessments: []Assessment{{Name: "fits", Requirement: RequirementGangScheduling, Status: StatusPassed}}}}
	all := Requested(Ask{})
	if got := RunVerdict(fs); got != VerdictPassed {
		t.Errorf("nothing requested: %s, want PASSED", got)
	}
	if got := RunVerdict(fs, RequirementGangScheduling); got != VerdictPassed {
		t.Errorf("only the tested requirement requested: %s, want PASSED", got)
	}
	if got := RunVerdict(fs, all...); got != VerdictPartial {
		t.Errorf("every requirement requested, one tested: %s, want PARTIAL", got)
	}
	failed := append(slices.Clone(fs), Feature{Name: "x", Assessments: []Assessment{{Name: "y", Status: StatusFailed}}})
	if got := RunVerdict(failed, all...); got != VerdictFailed {
		t.Errorf("a failure with untested requirements: %s, want FAILED", got)
	}
	r := &Results{Features: fs, Requested: all}
	r.Finalize()
	if r.Verdict != VerdictPartial || r.Passed() {
		t.Errorf("Finalize: %s", r.Verdict)
	}
	for _, ev := range r.Evidence {
		if !ev.Requested {
			t.Errorf("%s not marked requested", ev.Requirement)
		}
	}
	if md := r.Markdown(); !strings.Contains(md, "| accelerator_metrics | KAR-0059 | *not tested, asked for* |") {
		t.Errorf("the report does not say an asked requirement was not tested:\n%s", md)
	}
}

func TestRequested(t *testing.T) {
	for _, tc := range []struct {
		ask  Ask
		want []Requirement
	}{
		{Ask{}, []Requirement{RequirementGangScheduling, RequirementAcceleratorMetrics, RequirementRobustController, RequirementSecureAcceleratorAccess, RequirementDRASupport, RequirementClusterAutoscaling}},
		{Ask{MockGPUs: true}, []Requirement{RequirementGangScheduling, RequirementAcceleratorMetrics, RequirementRobustController, RequirementDRASupport, RequirementClusterAutoscaling}},
		{Ask{MockGPUs: true, NoDRA: true}, []Requirement{RequirementGangScheduling, RequirementAcceleratorMetrics, RequirementRobustController, RequirementClusterAutoscaling}},
		{Ask{MockGPUs: true, RealGPUs: true}, []Requirement{RequirementGangScheduling, RequirementAcceleratorMetrics, RequirementRobustController, RequirementSecureAcceleratorAccess, RequirementDRASupport, RequirementClusterAutoscaling}},
		{Ask{MockGPUs: true, NoAutoscaler: true}, []Requirement{RequirementGangScheduling, RequirementAcceleratorMetrics, RequirementRobustController, RequirementDRASupport}},
		{Ask{Filtered: true}, nil},
	} {
		if got := Requested(tc.ask); !slices.Equal(got, tc.want) {
			t.Errorf("Requested(%+v) = %v, want %v", tc.ask, got, tc.want)
		}
	}
}

// A --requirements run is judged on what it selected: a skip elsewhere is
// reported but does not make it PARTIAL; a failure anywhere still fails
// it, and a selected requirement skipped or not tested still makes it
// PARTIAL.
func TestSelectedVerdict(t *testing.T) {
	gang := Feature{Name: "gang", Assessments: []Assessment{{Name: "fits", Requirement: RequirementGangScheduling, Status: StatusPassed}}}
	leaderSkipped := Feature{Name: "controller", Assessments: []Assessment{
		{Name: "valid", Requirement: RequirementRobustController, Status: StatusPassed},
		{Name: "leader", Requirement: RequirementRobustController, Status: StatusSkipped, Reason: "needs --disruptive"}}}
	xidSkipped := Feature{Name: "inventory", Assessments: []Assessment{{Name: "xid", Requirement: RequirementNone, Status: StatusSkipped}}}
	failed := Feature{Name: "metrics", Assessments: []Assessment{{Name: "series", Requirement: RequirementAcceleratorMetrics, Status: StatusFailed}}}
	gangSkipped := Feature{Name: "gang", Assessments: []Assessment{{Name: "fits", Requirement: RequirementGangScheduling, Status: StatusSkipped}}}
	for _, tc := range []struct {
		name     string
		fs       []Feature
		selected []Requirement
		want     Verdict
	}{
		{"skips outside the selection", []Feature{gang, leaderSkipped, xidSkipped}, []Requirement{RequirementGangScheduling}, VerdictPassed},
		{"a skip of a selected requirement", []Feature{gang, leaderSkipped}, []Requirement{RequirementGangScheduling, RequirementRobustController}, VerdictPartial},
		{"none selects gpulab's own checks", []Feature{gang, xidSkipped}, []Requirement{RequirementGangScheduling, RequirementNone}, VerdictPartial},
		{"a failure outside the selection", []Feature{gang, failed}, []Requirement{RequirementGangScheduling}, VerdictFailed},
		{"a selected requirement not tested", []Feature{gang}, []Requirement{RequirementGangScheduling, RequirementDRASupport}, VerdictPartial},
		{"the selection only skipped", []Feature{gangSkipped}, []Requirement{RequirementGangScheduling}, VerdictPartial},
		{"nothing it asked ran", []Feature{leaderSkipped}, []Requirement{RequirementGangScheduling}, VerdictPartial},
	} {
		if got := SelectedVerdict(tc.fs, tc.selected...); got != tc.want {
			t.Errorf("%s: SelectedVerdict = %s, want %s", tc.name, got, tc.want)
		}
	}
	r := &Results{Features: []Feature{gang, leaderSkipped}, Requested: []Requirement{RequirementGangScheduling}, RequirementsSelected: true}
	r.Finalize()
	if r.Verdict != VerdictPassed || r.Features[1].Status != StatusPartial {
		t.Errorf("Finalize: verdict %s, controller %s; want PASSED with the controller still reported partial", r.Verdict, r.Features[1].Status)
	}
	if md := r.Markdown(); !strings.Contains(md, "| robust_controller | KAR-0063 | *partial* (not selected by --requirements) |") {
		t.Errorf("the report does not say robust_controller was not selected:\n%s", md)
	}
	// Without the selection the same run is PARTIAL, as before.
	r.RequirementsSelected = false
	r.Finalize()
	if r.Verdict != VerdictPartial {
		t.Errorf("unselected: %s, want PARTIAL", r.Verdict)
	}
	if got := Requested(Ask{Filtered: true, Requirements: []Requirement{RequirementNone}}); !slices.Equal(got, []Requirement{RequirementNone}) {
		t.Errorf("Requested with --requirements = %v, want the selection", got)
	}
}

// A cluster without an autoscaler reports the autoscaling feature skipped
// and is not PARTIAL for it; a run of that feature alone tested nothing
// (PARTIAL), and --requirements=cluster_autoscaling keeps it asked.
func TestUnavailableRequirement(t *testing.T) {
	skipped := Feature{Name: "autoscaling", Assessments: []Assessment{{Name: "up", Requirement: RequirementClusterAutoscaling, Status: StatusSkipped, Reason: "no node autoscaler"}}}
	gang := Feature{Name: "gang", Assessments: []Assessment{{Name: "fits", Requirement: RequirementGangScheduling, Status: StatusPassed}}}
	ask := Ask{MockGPUs: true, NoAutoscaler: true}
	r := &Results{Features: []Feature{gang, skipped}, Requested: []Requirement{RequirementGangScheduling}, Unavailable: Unavailable(ask)}
	if v := r.RunVerdict(); v != VerdictPassed {
		t.Errorf("no autoscaler, the rest passed: %s, want PASSED", v)
	}
	r.Features = []Feature{skipped}
	if v := r.RunVerdict(); v != VerdictPartial {
		t.Errorf("only the skipped autoscaling feature: %s, want PARTIAL", v)
	}
	failed := skipped
	failed.Assessments = []Assessment{{Name: "up", Requirement: RequirementClusterAutoscaling, Status: StatusFailed}}
	r.Features = []Feature{gang, failed}
	if v := r.RunVerdict(); v != VerdictFailed {
		t.Errorf("a failed autoscaling assessment: %s, want FAILED", v)
	}
	asked := Ask{NoAutoscaler: true, Requirements: []Requirement{RequirementClusterAutoscaling}}
	if u := Unavailable(asked); u != nil {
		t.Errorf("--requirements=cluster_autoscaling: unavailable %v, want none", u)
	}
	if u := Unavailable(Ask{}); u != nil {
		t.Errorf("with an autoscaler: unavailable %v", u)
	}
}
