package results

import "fmt"

// PlanInput is what --dry-run knows of a run before it starts: what it
// asks for, its flags, and what it found of the cluster.
type PlanInput struct {
	Ask Ask
	// Profile is local, kind or cluster.
	Profile string
	// Disruptive is --disruptive (on by default for local and kind).
	Disruptive bool
	// Prometheus says --prometheus-url was given.
	Prometheus bool
	// WholeFreeNodes are the footprint's whole free GPU nodes.
	WholeFreeNodes int
	// GPULab says gpulab's CRDs are served (its operator's features).
	GPULab bool
	// DeviceClass names --device-class when the cluster serves it, ""
	// when it does not (or DRA is not served at all).
	DeviceClass string
	// Autoscaler is the node autoscaler the run found or was told
	// (karpenter, cluster-autoscaler), "" for none.
	Autoscaler string
	// MaxNewNodes is --max-new-nodes: the nodes the autoscaling feature
	// may make the cluster add (0 refuses it on a cluster).
	MaxNewNodes int
	// NewNodesNeeded is how many nodes the autoscaling feature would add
	// (its largest gang's lack); 0 when unknown.
	NewNodesNeeded int
}

// RequirementPlan is --dry-run's word on one requirement: whether the run
// asks for it, and whether what it was given lets it be evidenced.
type RequirementPlan struct {
	Requirement Requirement
	Asked       bool
	// Missing is what the run lacks to evidence it; "" when nothing.
	Missing string
}

// String is one line of the dry run's requirements table.
func (p RequirementPlan) String() string {
	asked := "not asked"
	if p.Asked {
		asked = "asked"
	}
	switch {
	case p.Missing == "":
		return fmt.Sprintf("%-26s %-10s can be evidenced", p.Requirement, asked)
	case p.Asked:
		return fmt.Sprintf("%-26s %-10s CANNOT, the run would be PARTIAL: %s", p.Requirement, asked, p.Missing)
	}
	return fmt.Sprintf("%-26s %-10s cannot: %s", p.Requirement, asked, p.Missing)
}

// PlanRequirements says, per checklist requirement and for gpulab's own
// checks, what cluster docs/conformance/cluster.md's "What PASSED needs"
// table says: whether this run asks for it and what it lacks.
func PlanRequirements(in PlanInput) []RequirementPlan {
	asked := map[Requirement]bool{}
	for _, r := range Requested(in.Ask) {
		asked[r] = true
	}
	onCluster := in.Profile == "cluster"
	var out []RequirementPlan
	for _, info := range append(append([]RequirementInfo(nil), Requirements...), RequirementInfo{ID: RequirementNone}) {
		p := RequirementPlan{Requirement: info.ID, Asked: asked[info.ID]}
		switch info.ID {
		case RequirementGangScheduling:
			if in.WholeFreeNodes < 2 {
				p.Missing = fmt.Sprintf("the over-capacity and contention gangs need 2 whole free GPU nodes in the footprint (--max-gpus), it has %d", in.WholeFreeNodes)
			}
		case RequirementRobustController:
			switch {
			case onCluster && !in.GPULab:
				p.Missing = "gpulab's operator and CRDs are not installed"
			case !in.Disruptive:
				p.Missing = "the leader kill needs --disruptive"
			}
		case RequirementAcceleratorMetrics:
			if onCluster && !in.Prometheus {
				p.Missing = "the per-GPU series need --prometheus-url (a Prometheus scraping gpulab's agent or DCGM exporter)"
			}
		case RequirementSecureAcceleratorAccess:
			if !in.Ask.RealGPUs {
				p.Missing = "needs --real-gpus (real GPUs and a container toolkit)"
			}
		case RequirementDRASupport:
			switch {
			case in.Profile == "kind":
				p.Missing = "the kind testbed publishes no DRA devices"
			case onCluster && in.DeviceClass == "":
				p.Missing = "the cluster serves no DeviceClass of --device-class (a DRA driver publishing it)"
			}
		case RequirementClusterAutoscaling:
			p.Missing = autoscalingMissing(in, onCluster)
		case RequirementNone:
			if in.Profile != "local" {
				p.Missing = "the XID check runs only on --profile=local"
			}
		}
		out = append(out, p)
	}
	return out
}

// autoscalingMissing is what keeps the autoscaling feature from
// evidencing cluster_autoscaling: an autoscaler, and on a cluster
// --disruptive and a --max-new-nodes budget for the nodes it would add.
func autoscalingMissing(in PlanInput, onCluster bool) string {
	switch {
	case in.Autoscaler == "" && in.Profile == "local":
		return "the local testbed runs no autoscaler unless asked: --autoscaler=karpenter starts Karpenter"
	case in.Autoscaler == "":
		return "no node autoscaler found (Karpenter NodePools) or named (--autoscaler=karpenter|cluster-autoscaler)"
	case onCluster && !in.Disruptive:
		return "it makes the cluster add and remove nodes: needs --disruptive"
	case onCluster && in.MaxNewNodes < 1:
		return "it makes the cluster add nodes: needs a --max-new-nodes budget"
	case onCluster && in.NewNodesNeeded > in.MaxNewNodes:
		return fmt.Sprintf("its gangs need %d new nodes, --max-new-nodes is %d", in.NewNodesNeeded, in.MaxNewNodes)
	}
	return ""
}
