// Package footprint is the arithmetic of a conformance run's budget: which
// GPU nodes a run may use under --max-gpus, and the gang shapes each
// feature sizes from the room it finds there. The suite and --dry-run share
// it, so the plan printed is the plan run.
package footprint

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpulab/gpulab/internal/gfd"
)

// Budget is --max-gpus: a count, or all. Unset, it follows the profile.
type Budget struct {
	GPUs int
	All  bool
	set  bool
}

// DefaultClusterBudget is --max-gpus on the kind and cluster profiles: a
// run on a shared cluster takes a few nodes' worth, not every free GPU.
const DefaultClusterBudget = 16

func (b *Budget) String() string {
	switch {
	case b.All:
		return "all"
	case b.set || b.GPUs > 0:
		return strconv.Itoa(b.GPUs)
	}
	return ""
}

// Set parses a count or "all" (flag.Value).
func (b *Budget) Set(s string) error {
	if s == "all" {
		*b = Budget{All: true, set: true}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("want a positive number of GPUs or all, got %q", s)
	}
	*b = Budget{GPUs: n, set: true}
	return nil
}

// IsSet says whether the flag was given.
func (b Budget) IsSet() bool { return b.set }

// Allows says whether gpus fit the budget.
func (b Budget) Allows(gpus int) bool { return b.All || gpus <= b.GPUs }

// Node is a GPU node a run may use: its GPUs and those free now.
type Node struct {
	Name       string
	GPUs, Free int
}

// Pool takes the nodes with the most free GPUs first (whole free nodes
// make the gang scenarios possible) while their GPUs fit the budget; a
// node that would overflow it is passed over for smaller ones.
func Pool(nodes []Node, budget Budget) []Node {
	sorted := append([]Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Free != sorted[j].Free {
			return sorted[i].Free > sorted[j].Free
		}
		return sorted[i].Name < sorted[j].Name
	})
	var pool []Node
	total := 0
	for _, n := range sorted {
		if budget.Allows(total + n.GPUs) {
			pool = append(pool, n)
			total += n.GPUs
		}
	}
	return pool
}

// Room is what a pool offers now: its free GPUs, the node size its gangs
// are shaped for (NodeGPUs: the GPU count most of its nodes have, the
// larger on a tie) and how many nodes of that size are wholly free.
type Room struct{ Free, Whole, NodeGPUs int }

// RoomOf adds up the pool's free GPUs. A gang worker asks for a whole node
// of the pool's usual size, so 1-, 2-, 4-, 8- or 16-GPU fleets all get
// gangs that fill whole nodes.
func RoomOf(pool []Node) Room {
	sizes := map[int]int{}
	for _, n := range pool {
		sizes[n.GPUs]++
	}
	var r Room
	for gpus, count := range sizes {
		if count > sizes[r.NodeGPUs] || count == sizes[r.NodeGPUs] && gpus > r.NodeGPUs {
			r.NodeGPUs = gpus
		}
	}
	for _, n := range pool {
		r.Free += n.Free
		if n.GPUs == r.NodeGPUs && n.Free == n.GPUs {
			r.Whole++
		}
	}
	return r
}

// LatencyWorkerGPUs is each of a latency cluster's 2 workers' GPUs: 4, or
// a whole node where nodes are smaller.
func LatencyWorkerGPUs(r Room) int { return max(min(4, r.NodeGPUs), 1) }

// LatencyClusters is how many 1 head + 2 worker clusters the latency run
// creates at once: --scale, or as many as the room holds.
func LatencyClusters(scale int, r Room) int { return min(scale, r.Free/(2*LatencyWorkerGPUs(r))) }

// Overcommitted is the latency feature's contention run: gangs of two
// whole nodes, more than fit at once (n > fits). It needs fits >= 1.
func Overcommitted(r Room) (fits, n int) {
	fits = r.Whole / 2
	return fits, fits + max(fits/2, 1)
}

// ContendingGangs is the gang feature's K gangs, two of which fill the
// whole free nodes; each has Whole/2 workers of a whole node.
const ContendingGangs = 4

// JobWorkers is each GPUJob's whole-node workers. On a queue sized to one
// gang, 2; without one, the free nodes themselves must fit only one gang,
// and two gangs of Whole/2+1 never fit together.
func JobWorkers(r Room, queued bool) int {
	if queued {
		return min(r.Whole, 2)
	}
	return r.Whole/2 + 1
}

// BoundGPUs is what a pod holds on its node: the GPUs it requests (limits
// stand in for requests, as the API server defaults them for extended
// resources) once bound, and none before it is bound or after it ended.
func BoundGPUs(p *corev1.Pod) int64 {
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return 0
	}
	var n int64
	for _, ctr := range p.Spec.Containers {
		q, ok := ctr.Resources.Requests[gfd.GPUResource]
		if !ok {
			q = ctr.Resources.Limits[gfd.GPUResource]
		}
		n += q.Value()
	}
	return n
}

// Usable says whether the suite's pods can be placed on n, and if not why:
// it must be schedulable and carry no NoSchedule or NoExecute taint they do
// not tolerate. They tolerate only the GPU taint (nvidia.com/gpu,
// NoSchedule) GPU nodes commonly carry; a node that is not Ready carries
// node.kubernetes.io/not-ready, or unreachable, and is not usable either.
func Usable(n *corev1.Node) (bool, string) {
	if n.Spec.Unschedulable {
		return false, "cordoned"
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if taint.Key == string(gfd.GPUResource) && taint.Effect == corev1.TaintEffectNoSchedule {
			continue
		}
		return false, fmt.Sprintf("taint %s=%s:%s", taint.Key, taint.Value, taint.Effect)
	}
	return true, ""
}

// MIGDevices are the MIG devices a node advertises (nvidia.com/mig-<profile>
// under the device plugin's mixed strategy), by profile: a MIG-partitioned
// node's GPUs are not whole nvidia.com/gpu, and the gang features do not
// use MIG devices.
func MIGDevices(n *corev1.Node) map[string]int64 {
	out := map[string]int64{}
	for name, q := range n.Status.Allocatable {
		if p, ok := strings.CutPrefix(string(name), "nvidia.com/mig-"); ok && q.Value() > 0 {
			out[p] = q.Value()
		}
	}
	return out
}
