package results

import (
	"strings"
	"testing"
)

// The dry run's table follows "What PASSED needs": a bare cluster run
// asks for everything it could show and lacks the flags for most of it;
// one given them all lacks nothing; --requirements narrows what is asked.
func TestPlanRequirements(t *testing.T) {
	missing := func(plan []RequirementPlan) map[Requirement]string {
		m := map[Requirement]string{}
		for _, p := range plan {
			if p.Missing != "" {
				m[p.Requirement] = p.Missing
			}
		}
		return m
	}
	bare := PlanRequirements(PlanInput{Profile: "cluster", GPULab: true, WholeFreeNodes: 1})
	for r, want := range map[Requirement]string{
		RequirementGangScheduling:          "2 whole free GPU nodes",
		RequirementRobustController:        "--disruptive",
		RequirementAcceleratorMetrics:      "--prometheus-url",
		RequirementSecureAcceleratorAccess: "--real-gpus",
		RequirementDRASupport:              "DeviceClass",
		RequirementClusterAutoscaling:      "no node autoscaler",
		RequirementNone:                    "--profile=local",
	} {
		if got := missing(bare)[r]; !strings.Contains(got, want) {
			t.Errorf("a bare cluster run, %s: missing %q, want it to name %q", r, got, want)
		}
	}
	for _, p := range bare {
		if !p.Asked && p.Requirement != RequirementNone {
			t.Errorf("a whole cluster run does not ask for %s", p.Requirement)
		}
		if p.Asked && !strings.Contains(p.String(), "PARTIAL") {
			t.Errorf("%s: %q does not say the run would be PARTIAL", p.Requirement, p)
		}
	}

	full := PlanRequirements(PlanInput{Profile: "cluster", GPULab: true, WholeFreeNodes: 2, Disruptive: true, Prometheus: true,
		DeviceClass: "gpu.gpulab.io", Ask: Ask{RealGPUs: true}, Autoscaler: "karpenter", MaxNewNodes: 2, NewNodesNeeded: 2})
	if m := missing(full); len(m) != 1 || m[RequirementNone] == "" {
		t.Errorf("a cluster run with every flag lacks %v, want only the local-only XID check", m)
	}

	local := PlanRequirements(PlanInput{Profile: "local", GPULab: true, WholeFreeNodes: 4, Disruptive: true, Ask: Ask{MockGPUs: true}, Autoscaler: "karpenter"})
	for _, p := range local {
		if p.Requirement == RequirementSecureAcceleratorAccess {
			if p.Asked {
				t.Errorf("the local testbed's mock GPUs: secure_accelerator_access asked")
			}
		} else if p.Missing != "" {
			t.Errorf("local: %s lacks %q", p.Requirement, p.Missing)
		}
	}

	// The autoscaling feature on a cluster: an autoscaler, --disruptive and
	// a --max-new-nodes budget that covers its gangs.
	for _, tc := range []struct {
		in   PlanInput
		want string
	}{
		{PlanInput{Profile: "local", Ask: Ask{NoAutoscaler: true}}, "--autoscaler=karpenter"},
		{PlanInput{Profile: "cluster", Autoscaler: "karpenter", MaxNewNodes: 2}, "--disruptive"},
		{PlanInput{Profile: "cluster", Autoscaler: "karpenter", Disruptive: true}, "--max-new-nodes budget"},
		{PlanInput{Profile: "cluster", Autoscaler: "karpenter", Disruptive: true, MaxNewNodes: 1, NewNodesNeeded: 2}, "need 2 new nodes, --max-new-nodes is 1"},
		{PlanInput{Profile: "cluster", Autoscaler: "cluster-autoscaler", Disruptive: true, MaxNewNodes: 2, NewNodesNeeded: 2}, ""},
	} {
		if got := missing(PlanRequirements(tc.in))[RequirementClusterAutoscaling]; (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: cluster_autoscaling lacks %q, want %q", tc.in, got, tc.want)
		}
	}

	narrowed := PlanRequirements(PlanInput{Profile: "cluster", Ask: Ask{Requirements: []Requirement{RequirementGangScheduling}}, WholeFreeNodes: 2})
	for _, p := range narrowed {
		if p.Asked != (p.Requirement == RequirementGangScheduling) {
			t.Errorf("--requirements=gang_scheduling: %s asked %v", p.Requirement, p.Asked)
		}
	}
}
