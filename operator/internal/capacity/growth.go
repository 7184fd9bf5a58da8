package capacity

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// Pool is what an autoscaler declares it can add: a Karpenter NodePool,
// by the GPU products its nodes may carry and the GPUs its limits leave.
type Pool struct {
	Name string
	// Products are the GFD products its nodes may carry; empty: any.
	Products []string
	// Room is how many more GPUs its limits allow; negative: no limit.
	Room int64
}

// offers says whether the pool may add nodes with sel's GPUs. A pool's
// GPU memory and DRA devices are not declared, so only the product can
// rule it out.
func (p Pool) offers(sel Selector) bool {
	return sel.Product == "" || len(p.Products) == 0 || slices.Contains(p.Products, sel.Product)
}

// Grow judges a gang that Check found does not fit today's nodes, on a
// cluster whose autoscaler declares pools: it Grows when, for each kind of
// GPU the gang lacks, the pools that offer it have room for at least what
// is lacking; otherwise no pool can ever host it. Karpenter picks an
// instance type that holds the pod, so a pool's node shape is not judged,
// only its limits. undeclared (an autoscaler the operator cannot see,
// spec.scheduling.capacity Autoscaled) grows without pools.
func Grow(nodes []Node, pools []Pool, demands []Demand, undeclared bool) Verdict {
	lacking := Lacking(nodes, demands)
	if undeclared {
		return Verdict{Grows: true, Reason: gpulabv1alpha1.ReasonWaitingForNodes,
			Message: fmt.Sprintf("the gang needs %s more than today's nodes hold; spec.scheduling.capacity is Autoscaled: waiting for the cluster's autoscaler to add nodes", describeLack(lacking))}
	}
	var names []string
	for _, sel := range sortedSelectors(lacking) {
		need := lacking[sel]
		var room int64
		var offering []string
		for _, p := range pools {
			if !p.offers(sel) {
				continue
			}
			offering = append(offering, p.Name)
			if p.Room < 0 || room < 0 {
				room = -1
			} else {
				room += p.Room
			}
		}
		switch {
		case len(offering) == 0:
			return Verdict{Reason: gpulabv1alpha1.ReasonNoNodePoolFits,
				Message: fmt.Sprintf("the gang needs %d more %s than today's nodes hold, and no NodePool offers them (%s)", need, sel, describePools(pools))}
		case room >= 0 && room < need:
			return Verdict{Reason: gpulabv1alpha1.ReasonNoNodePoolFits,
				Message: fmt.Sprintf("the gang needs %d more %s than today's nodes hold; NodePool %s can add at most %d (their limits)", need, sel, strings.Join(offering, ", "), room)}
		}
		names = append(names, offering...)
	}
	slices.Sort(names)
	return Verdict{Grows: true, Reason: gpulabv1alpha1.ReasonWaitingForNodes,
		Message: fmt.Sprintf("the gang needs %s more than today's nodes hold: waiting for NodePool %s to add nodes", describeLack(lacking), strings.Join(slices.Compact(names), ", "))}
}

// Lacking is, per kind of GPU, how many the gang needs beyond today's
// nodes: the larger of its pods that find no node with room (a pod needs
// all its GPUs on one node) and its GPUs beyond the matching nodes' total.
func Lacking(nodes []Node, demands []Demand) map[Selector]int64 {
	perPod := map[Selector]int64{}
	need := map[Selector]int64{}
	for _, d := range demands {
		if d.GPUsPerPod <= 0 || d.Pods <= 0 {
			continue
		}
		var slots int32
		for _, n := range nodes {
			if d.Selector.Matches(n) {
				slots += n.Available(d.Selector) / d.GPUsPerPod
			}
		}
		if missing := d.Pods - slots; missing > 0 {
			perPod[d.Selector] += int64(missing) * int64(d.GPUsPerPod)
		}
		need[d.Selector] += int64(d.Pods) * int64(d.GPUsPerPod)
	}
	out := map[Selector]int64{}
	for sel, n := range need {
		var have int64
		for _, node := range nodes {
			if sel.Matches(node) {
				have += int64(node.Available(sel))
			}
		}
		if lack := max(perPod[sel], n-have); lack > 0 {
			out[sel] = lack
		}
	}
	return out
}

func sortedSelectors(m map[Selector]int64) []Selector {
	out := make([]Selector, 0, len(m))
	for sel := range m {
		out = append(out, sel)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func describeLack(lacking map[Selector]int64) string {
	var parts []string
	for _, sel := range sortedSelectors(lacking) {
		parts = append(parts, fmt.Sprintf("%d %s", lacking[sel], sel))
	}
	if len(parts) == 0 {
		return "nodes"
	}
	return strings.Join(parts, " and ")
}

func describePools(pools []Pool) string {
	if len(pools) == 0 {
		return "no NodePool"
	}
	var parts []string
	for _, p := range pools {
		what := "any GPU"
		if len(p.Products) > 0 {
			what = strings.Join(p.Products, ", ")
		}
		parts = append(parts, fmt.Sprintf("%s: %s", p.Name, what))
	}
	return strings.Join(parts, "; ")
}
