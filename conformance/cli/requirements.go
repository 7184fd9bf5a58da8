package cli

import (
	"fmt"
	"strings"

	"github.com/gpulab/gpulab/conformance/results"
)

// requirementsUsage is run's --requirements help.
const requirementsUsage = "only these checklist requirements must be evidenced, comma-separated (gang_scheduling, accelerator_metrics, robust_controller, " +
	"secure_accelerator_access, dra_support; none: gpulab's own checks): a skip elsewhere is reported, never turns the run PARTIAL; a failure anywhere fails it " +
	"(default: every requirement the cluster can show)"

// requirementsValue is --requirements: a selection of checklist ids,
// checked as it is parsed. Nil is no selection.
type requirementsValue []results.Requirement

func (v *requirementsValue) String() string {
	out := make([]string, len(*v))
	for i, r := range *v {
		out[i] = string(r)
	}
	return strings.Join(out, ",")
}

func (v *requirementsValue) Set(s string) error {
	var sel []results.Requirement
	for _, id := range strings.Split(s, ",") {
		r := results.Requirement(strings.TrimSpace(id))
		if !results.KnownRequirement(r) {
			var known []string
			for _, info := range results.Requirements {
				known = append(known, string(info.ID))
			}
			return fmt.Errorf("%q is not a requirement: want %s or none", r, strings.Join(known, ", "))
		}
		sel = append(sel, r)
	}
	*v = sel
	return nil
}
