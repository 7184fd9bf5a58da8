package cli

import (
	"fmt"
	"regexp"
)

// LeaderKillAssessment is the controller feature's assessment that kills
// the operator's leader: the one disruptive action on a cluster.
const LeaderKillAssessment = "the leader killed mid-flight recovers with no duplicate pods"

// Action is something a run does beyond creating and deleting its own
// labelled objects, as --dry-run lists it.
type Action struct {
	Feature, Assessment string
	// What the action does.
	What string
	// Taken says whether this run would do it; Why says why not.
	Taken bool
	Why   string
}

// DisruptiveActions are the disruptive actions of the features and
// assessments this run selects, each saying whether the run would take it.
func (o *RunOptions) DisruptiveActions() []Action {
	kill := Action{Feature: "controller", Assessment: LeaderKillAssessment, Taken: o.Disruptive}
	switch o.Profile {
	case "local":
		kill.What = "SIGKILL the operator process that leads (the testbed's own), then restart it"
	default:
		kill.What = fmt.Sprintf("force-delete (grace period 0) the pod holding the Lease %s/gpulab-operator.gpulab.io, once a second replica is Ready", o.OperatorNamespace)
	}
	switch {
	case o.Workload != "gpucluster":
		kill.Taken, kill.Why = false, fmt.Sprintf("--workload=%s: the leader failover is gpulab's own", o.Workload)
	case !o.Disruptive:
		kill.Why = "--disruptive not given (off by default on --profile=cluster); the assessment is reported skipped"
	}
	actions := []Action{kill}
	if o.Profile == "local" {
		actions = append(actions, Action{Feature: "inventory", Assessment: "a GPU with a critical XID is reported Unhealthy", Taken: true,
			What: "cordon one of the testbed's fake GPU nodes and inject XID 79 through its simulated agent"})
	}
	var out []Action
	for _, a := range actions {
		if o.selected(a.Feature, a.Assessment) {
			out = append(out, a)
		}
	}
	return out
}

// selected mirrors e2e-framework's --feature, --skip-feature, --assess and
// --skip-assess filters (validate has compiled each).
func (o *RunOptions) selected(feature, assessment string) bool {
	for _, f := range []struct {
		re, name string
		want     bool
	}{{o.Features, feature, true}, {o.SkipFeatures, feature, false}, {o.Assess, assessment, true}, {o.SkipAssess, assessment, false}} {
		if f.re != "" && regexp.MustCompile(f.re).MatchString(f.name) != f.want {
			return false
		}
	}
	return true
}
