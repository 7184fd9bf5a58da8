package conformance

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
	"sigs.k8s.io/e2e-framework/pkg/types"

	"github.com/gpulab/gpulab/conformance/results"
)

// plan builds a feature whose assessments each name the AI-conformance
// requirement they evidence: the one home of that mapping. Every
// assessment records its own outcome, from its own *testing.T (hooks only
// see the parent's, which never reads as skipped).
type plan struct {
	name    string
	builder *features.FeatureBuilder
}

func newPlan(name string) *plan {
	return &plan{name: name, builder: features.New(name).WithLabel("area", name)}
}

// assess adds an assessment that evidences req (results.RequirementNone for
// gpulab's own checks).
func (p *plan) assess(req results.Requirement, name string, fn features.Func) *plan {
	if !results.KnownRequirement(req) {
		panic(fmt.Sprintf("assessment %q: unknown requirement %q", name, req))
	}
	mu.Lock()
	if requirements[p.name] == nil {
		requirements[p.name] = map[string]results.Requirement{}
	}
	requirements[p.name][name] = req
	mu.Unlock()
	p.builder = p.builder.Assess(name, recorded(p.name, name, req, fn))
	return p
}

// assessIf adds an assessment that runs only where it can (XID injection
// needs the local testbed's simulated agent); elsewhere it is reported
// skipped, saying why, never dropped from the report.
func (p *plan) assessIf(can bool, why string, req results.Requirement, name string, fn features.Func) *plan {
	if !can {
		fn = func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			skipf(t, "%s", why)
			return ctx
		}
	}
	return p.assess(req, name, fn)
}

func (p *plan) feature() features.Feature { return p.builder.Feature() }

var (
	// requirements maps feature → assessment → requirement, for
	// assessments that never ran.
	requirements = map[string]map[string]results.Requirement{}
	// recording holds each started feature, in the order they started.
	recording    = map[string]*results.Feature{}
	featureOrder []string
	starts       = map[string]time.Time{}
	// outcomes are the messages of the assessments running now.
	outcomes = map[*testing.T]*outcome{}
)

type outcome struct {
	skip     string
	failures []string
}

func outcomeOf(t *testing.T) *outcome {
	o := outcomes[t]
	if o == nil {
		o = &outcome{}
		outcomes[t] = o
	}
	return o
}

// recorded wraps an assessment so that its outcome is recorded once
// everything it registered has run: its first cleanup is registered here,
// so it runs last, after the scenario's own, which can still fail t.
func recorded(feature, name string, req results.Requirement, fn features.Func) features.Func {
	return func(ctx context.Context, t *testing.T, cfg *envconf.Config) (out context.Context) {
		start := time.Now()
		setCurrent(feature + ": " + name)
		t.Cleanup(func() { recordAssessment(feature, name, req, t, time.Since(start), context.Cause(ctx)) })
		// A signal stopped the run: what is left is not run, and the run
		// is FAILED for it (main_test.go).
		if ctx.Err() != nil {
			skipf(t, "not run: the run was stopped (%v)", context.Cause(ctx))
		}
		out = ctx
		// A panic would end the whole binary before any result is written.
		defer func() {
			if r := recover(); r != nil {
				failf(t, "panic: %v\n%s", r, debug.Stack())
			}
		}()
		return fn(ctx, t, cfg)
	}
}

var current string

func setCurrent(what string) {
	mu.Lock()
	defer mu.Unlock()
	current = what
}

// currentAssessment names the assessment running now, for progress lines.
func currentAssessment() string {
	mu.Lock()
	defer mu.Unlock()
	return current
}

// stopped is why the run's context ended (a signal), or nil: an assessment
// cut short by it is not a verdict on the cluster.
func recordAssessment(feature, name string, req results.Requirement, t *testing.T, took time.Duration, stopped error) {
	mu.Lock()
	defer mu.Unlock()
	o := outcomeOf(t)
	delete(outcomes, t)
	a := results.Assessment{Name: name, Requirement: req, Status: results.StatusPassed, Seconds: took.Seconds()}
	switch {
	case t.Failed() && stopped != nil:
		a.Status, a.Messages, a.Reason = results.StatusSkipped, o.failures, fmt.Sprintf("stopped before it finished (%v)", stopped)
	case t.Failed():
		a.Status, a.Messages, a.Reason = results.StatusFailed, o.failures, "failed without a message (see the test log)"
		if len(o.failures) > 0 {
			a.Reason = o.failures[0]
		}
	case t.Skipped():
		a.Status, a.Reason = results.StatusSkipped, o.skip
		if a.Reason == "" {
			a.Reason = "skipped without a reason (see the test log)"
		}
	}
	f := startFeature(feature, nil)
	f.Assessments = append(f.Assessments, a)
}

// startFeature returns the feature being recorded, starting it if new.
// Callers hold mu.
func startFeature(name string, labels types.Labels) *results.Feature {
	if f := recording[name]; f != nil {
		return f
	}
	f := &results.Feature{Name: name, Labels: map[string]string{}}
	for k, v := range labels {
		f.Labels[k] = strings.Join(v, ",")
	}
	recording[name] = f
	featureOrder = append(featureOrder, name)
	starts[name] = time.Now()
	return f
}

func beforeFeature(ctx context.Context, _ *envconf.Config, _ *testing.T, f features.Feature) (context.Context, error) {
	mu.Lock()
	defer mu.Unlock()
	startFeature(f.Name(), f.Labels())
	markClaims(f.Name())
	return ctx, nil
}

// afterFeature closes the feature: its duration, and a skip for each
// assessment that was asked for but never ran because an earlier one
// stopped the feature (e2e-framework runs none after a t.FailNow).
// Assessments --assess or --skip-assessment left out are not reported.
func afterFeature(ctx context.Context, cfg *envconf.Config, _ *testing.T, f features.Feature) (context.Context, error) {
	mu.Lock()
	defer mu.Unlock()
	rec := startFeature(f.Name(), f.Labels())
	rec.Seconds = time.Since(starts[f.Name()]).Seconds()
	ran := map[string]bool{}
	for _, a := range rec.Assessments {
		ran[a.Name] = true
	}
	for _, step := range features.GetStepsByLevel(f.Steps(), types.LevelAssess) {
		if ran[step.Name()] || !asked(cfg, step.Name()) {
			continue
		}
		rec.Assessments = append(rec.Assessments, results.Assessment{
			Name: step.Name(), Requirement: requirements[f.Name()][step.Name()], Status: results.StatusSkipped,
			Reason: "not run: an earlier assessment of the feature failed and stopped it",
		})
	}
	if a, ok := claimsVerdict(f.Name(), starts[f.Name()]); ok {
		rec.Assessments = append(rec.Assessments, a)
	}
	return ctx, nil
}

// asked mirrors e2e-framework's --assess and --skip-assessment filters.
func asked(cfg *envconf.Config, name string) bool {
	if re := cfg.AssessmentRegex(); re != nil && !re.MatchString(name) {
		return false
	}
	if re := cfg.SkipAssessmentRegex(); re != nil && re.MatchString(name) {
		return false
	}
	return true
}

// recordedFeatures are the features that ran an assessment, in order.
func recordedFeatures() []results.Feature {
	mu.Lock()
	defer mu.Unlock()
	var out []results.Feature
	for _, name := range featureOrder {
		if f := recording[name]; len(f.Assessments) > 0 {
			out = append(out, *f)
		}
	}
	return out
}

// failf records a failure message for the assessment's results and fails t.
func failf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	mu.Lock()
	o := outcomeOf(t)
	o.failures = append(o.failures, msg)
	mu.Unlock()
	t.Error(msg)
}

// fatalf is failf then stop the assessment.
func fatalf(t *testing.T, format string, args ...any) {
	t.Helper()
	failf(t, format, args...)
	t.FailNow()
}

// skipf records why the assessment could not run, then skips it.
func skipf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	mu.Lock()
	outcomeOf(t).skip = msg
	mu.Unlock()
	t.Skip(msg)
}
