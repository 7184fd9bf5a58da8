package results

import (
	"slices"
	"strings"
)

// Status is an assessment's, a feature's or a requirement's outcome.
type Status string

const (
	// StatusPassed is every check ran and held.
	StatusPassed Status = "passed"
	// StatusFailed is a check ran and did not hold.
	StatusFailed Status = "failed"
	// StatusSkipped is an assessment that was asked for but could not run
	// (too little capacity, a check the profile cannot do).
	StatusSkipped Status = "skipped"
	// StatusPartial is a feature or requirement with a skipped assessment
	// and no failed one.
	StatusPartial Status = "partial"
	// StatusNotTested is a requirement no assessment of the run evidences.
	StatusNotTested Status = "not_tested"
)

// String is the status as reports print it ("not tested").
func (s Status) String() string { return strings.ReplaceAll(string(s), "_", " ") }

// Verdict is a run's outcome.
type Verdict string

// The run verdicts, from RunVerdict.
const (
	VerdictPassed  Verdict = "PASSED"
	VerdictPartial Verdict = "PARTIAL"
	VerdictFailed  Verdict = "FAILED"
)

// Verdicts lists every verdict, for gauges that carry all of them.
var Verdicts = []Verdict{VerdictPassed, VerdictPartial, VerdictFailed}

// Exit codes of a suite run. 2 is bad usage (flags), as Go's flag package.
const (
	ExitPassed  = 0
	ExitFailed  = 1
	ExitUsage   = 2
	ExitPartial = 3
)

// ExitCode maps a run's verdict to the process's exit code.
func ExitCode(v Verdict) int {
	switch v {
	case VerdictPassed:
		return ExitPassed
	case VerdictPartial:
		return ExitPartial
	default:
		return ExitFailed
	}
}

// FeatureStatus is passed only if every assessment passed, partial if any
// was skipped and none failed, failed if any failed. A feature with no
// assessment tested nothing, which is not a pass: partial. An unknown
// status counts as failed.
func FeatureStatus(as []Assessment) Status {
	if len(as) == 0 {
		return StatusPartial
	}
	return worst(as, StatusPartial)
}

// RequirementStatus is FeatureStatus over the assessments that evidence a
// requirement, and not tested when none does.
func RequirementStatus(as []Assessment) Status {
	if len(as) == 0 {
		return StatusNotTested
	}
	return worst(as, StatusPartial)
}

func worst(as []Assessment, skipped Status) Status {
	s := StatusPassed
	for _, a := range as {
		switch a.Status {
		case StatusPassed:
		case StatusSkipped:
			s = skipped
		default:
			return StatusFailed
		}
	}
	return s
}

// RunVerdict is PASSED only if every feature passed, FAILED if any failed,
// PARTIAL otherwise, each feature judged from its assessments. A run with
// no feature (the filters matched nothing) tested nothing: FAILED. A
// requested requirement that no assessment evidences makes a run that
// would pass PARTIAL: it did not test what it was asked.
func RunVerdict(fs []Feature, requested ...Requirement) Verdict {
	if len(fs) == 0 {
		return VerdictFailed
	}
	v := VerdictPassed
	for _, f := range fs {
		switch FeatureStatus(f.Assessments) {
		case StatusPassed:
		case StatusPartial:
			v = VerdictPartial
		default:
			return VerdictFailed
		}
	}
	for _, ev := range KAREvidence(fs, requested...) {
		if ev.Requested && ev.Status == StatusNotTested {
			v = VerdictPartial
		}
	}
	return v
}

// SelectedVerdict is the verdict of a run asked to evidence only the
// requested requirements (--requirements): RunVerdict over the features
// without the skipped assessments that evidence anything else (a checklist
// requirement not selected, or gpulab's own checks, RequirementNone,
// unless "none" is selected). Those stay in the results, reported as they
// ran, and their requirements as not requested; a failure anywhere still
// fails the run, and a selected requirement not tested still makes it
// PARTIAL.
func SelectedVerdict(fs []Feature, requested ...Requirement) Verdict {
	var kept []Feature
	for _, f := range fs {
		var as []Assessment
		for _, a := range f.Assessments {
			if a.Status != StatusSkipped || slices.Contains(requested, a.Requirement) {
				as = append(as, a)
			}
		}
		if len(as) > 0 {
			f.Assessments = as
			kept = append(kept, f)
		}
	}
	if len(kept) == 0 && len(fs) > 0 {
		// Everything it ran was skipped: it tested nothing it was asked.
		return VerdictPartial
	}
	return RunVerdict(kept, requested...)
}

// RunVerdict is the run's verdict: SelectedVerdict for a --requirements
// run, else the package's RunVerdict.
func (r *Results) RunVerdict() Verdict {
	fs := withoutUnavailable(r.Features, r.Unavailable)
	if len(fs) == 0 && len(r.Features) > 0 {
		// Everything it ran has nothing to show on this cluster.
		return VerdictPartial
	}
	if r.RequirementsSelected {
		return SelectedVerdict(fs, r.Requested...)
	}
	return RunVerdict(fs, r.Requested...)
}

// withoutUnavailable drops the skipped assessments that evidence an
// unavailable requirement (and features left with none): a cluster
// without an autoscaler is not PARTIAL for the autoscaling feature it
// cannot run. Run and failed ones stay.
func withoutUnavailable(fs []Feature, unavailable []Requirement) []Feature {
	if len(unavailable) == 0 {
		return fs
	}
	var kept []Feature
	for _, f := range fs {
		var as []Assessment
		for _, a := range f.Assessments {
			if a.Status != StatusSkipped || !slices.Contains(unavailable, a.Requirement) {
				as = append(as, a)
			}
		}
		if len(as) > 0 {
			f.Assessments = as
			kept = append(kept, f)
		}
	}
	return kept
}

// Ask is what a run is asked to evidence, from its options.
type Ask struct {
	// Filtered is a run narrowed by --feature, --assess or their skips: it
	// asks for the requirements of what it selected, which the
	// assessments that ran evidence themselves.
	Filtered bool
	// MockGPUs is a testbed whose GPUs are mocks (local, kind): no
	// container can look at them, so it cannot test accelerator access.
	MockGPUs bool
	// RealGPUs is --real-gpus, which runs the accelerator-access checks.
	RealGPUs bool
	// NoDRA is a testbed that publishes no DRA devices (kind, whose real
	// kubelets would need the agent as a kubelet plugin): it cannot show
	// dra_support.
	NoDRA bool
	// NoAutoscaler is a cluster with no node autoscaler (--autoscaler=none,
	// or auto that found none; the local testbed unless it was started
	// with Karpenter): it cannot show cluster_autoscaling.
	NoAutoscaler bool
	// Requirements is --requirements: the run asks for these only (none
	// stands for gpulab's own checks), whatever else it is.
	Requirements []Requirement
}

// Requested are the checklist requirements a run asks for. A whole run
// asks for every one its cluster can show, so that a cluster run without
// --real-gpus is PARTIAL (accelerator access untested), never PASSED.
func Requested(a Ask) []Requirement {
	if a.Requirements != nil {
		return slices.Clone(a.Requirements)
	}
	if a.Filtered {
		return nil
	}
	var out []Requirement
	for _, info := range Requirements {
		if info.ID == RequirementSecureAcceleratorAccess && a.MockGPUs && !a.RealGPUs {
			continue
		}
		if info.ID == RequirementDRASupport && a.NoDRA {
			continue
		}
		if info.ID == RequirementClusterAutoscaling && a.NoAutoscaler {
			continue
		}
		out = append(out, info.ID)
	}
	return out
}

// Unavailable are the requirements the run's cluster has nothing to show
// for: cluster_autoscaling without an autoscaler. Their assessments are
// reported skipped, with the reason, and leave the verdict alone unless
// they are all the run did (then it is PARTIAL: it tested nothing) or
// --requirements asked for one of them.
func Unavailable(a Ask) []Requirement {
	if a.NoAutoscaler && !slices.Contains(a.Requirements, RequirementClusterAutoscaling) {
		return []Requirement{RequirementClusterAutoscaling}
	}
	return nil
}

// Requirement is a CNCF Kubernetes AI conformance checklist id an
// assessment evidences, or RequirementNone for gpulab's own checks.
type Requirement string

// The checklist ids the suite's assessments evidence, and none.
const (
	RequirementGangScheduling          Requirement = "gang_scheduling"
	RequirementAcceleratorMetrics      Requirement = "accelerator_metrics"
	RequirementRobustController        Requirement = "robust_controller"
	RequirementSecureAcceleratorAccess Requirement = "secure_accelerator_access"
	RequirementDRASupport              Requirement = "dra_support"
	RequirementClusterAutoscaling      Requirement = "cluster_autoscaling"
	RequirementNone                    Requirement = "none"
)

// RequirementInfo describes one checklist item.
type RequirementInfo struct {
	ID    Requirement
	KAR   string // "" where the checklist gives none
	Title string
}

// Requirements are the AI-conformance items the evidence section reports,
// in checklist order; each is reported even when nothing evidences it.
var Requirements = []RequirementInfo{
	{RequirementGangScheduling, "KAR-0053", "a gang scheduler installed and working: all-or-nothing placement"},
	{RequirementAcceleratorMetrics, "KAR-0059", "per-accelerator utilization and memory exposed in a standard format"},
	{RequirementRobustController, "KAR-0063", "an AI operator (CRDs, validation, reconciliation) that survives restarts and failover"},
	{RequirementSecureAcceleratorAccess, "", "a pod sees only the accelerators allocated to it"},
	{RequirementDRASupport, "KAR-0051", "accelerators allocated through Dynamic Resource Allocation (resource.k8s.io/v1)"},
	{RequirementClusterAutoscaling, "KAR-0055", "a cluster autoscaler adds accelerator nodes a pending gang needs, no more, and removes them once idle"},
}

// KnownRequirement says whether r is a checklist id or RequirementNone.
func KnownRequirement(r Requirement) bool {
	if r == RequirementNone {
		return true
	}
	for _, info := range Requirements {
		if info.ID == r {
			return true
		}
	}
	return false
}

// Evidence is one requirement's verdict from the assessments that prove it.
type Evidence struct {
	Requirement Requirement `json:"requirement"`
	KAR         string      `json:"kar,omitempty"`
	Title       string      `json:"title"`
	Status      Status      `json:"status"`
	// Assessments are "feature/assessment: status", in run order.
	Assessments []string `json:"assessments,omitempty"`
	// Requested says the run was asked to evidence it (Requested): not
	// tested then makes the run PARTIAL.
	Requested bool `json:"requested,omitempty"`
}

// KAREvidence aggregates the run's assessments by requirement, marking the
// requested ones.
func KAREvidence(fs []Feature, requested ...Requirement) []Evidence {
	var out []Evidence
	for _, info := range Requirements {
		e := Evidence{Requirement: info.ID, KAR: info.KAR, Title: info.Title, Requested: slices.Contains(requested, info.ID)}
		var as []Assessment
		for _, f := range fs {
			for _, a := range f.Assessments {
				if a.Requirement == info.ID {
					as = append(as, a)
					e.Assessments = append(e.Assessments, f.Name+"/"+a.Name+": "+a.Status.String())
				}
			}
		}
		e.Status = RequirementStatus(as)
		out = append(out, e)
	}
	return out
}

// Finalize derives each feature's status from its assessments, the run's
// verdict and the requirement evidence. Write calls it; call it after
// changing features.
func (r *Results) Finalize() {
	for i := range r.Features {
		r.Features[i].Status = FeatureStatus(r.Features[i].Assessments)
	}
	r.Verdict = r.RunVerdict()
	r.Evidence = KAREvidence(r.Features, r.Requested...)
}

// Passed says whether the run's verdict is PASSED.
func (r *Results) Passed() bool { return r.RunVerdict() == VerdictPassed }

// RunFeature names the entry a run adds about itself: what stopped it
// before it finished (a signal, --timeout).
const RunFeature = "run"

// RunStopped is the run's own failed entry: check is what did not hold
// ("the run finished within --timeout"), why what happened instead. The
// run is FAILED for it, whatever its assessments say: it did not test
// what it was asked.
func RunStopped(check, why string) Feature {
	return Feature{Name: RunFeature, Assessments: []Assessment{{Name: check, Requirement: RequirementNone,
		Status: StatusFailed, Reason: why, Messages: []string{why}}}}
}
