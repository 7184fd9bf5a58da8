// Package autoscale is the autoscaling feature's arithmetic, apart from
// any cluster: what a Karpenter NodePool allows (its GPU limit, what it
// holds, how soon it consolidates), how large the feature's gangs are, and
// how many nodes a scale-up added beyond the gang's need. The feature
// (conformance/autoscaling_test.go) reads the cluster; this package judges.
package autoscale

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpulab/gpulab/internal/karpenter"
)

// Pool is a NodePool as the feature judges it: what karpenter.ReadNodePool
// reads (its limit, what it holds, how soon it consolidates) and the whole
// nodes its room allows.
type Pool struct{ karpenter.NodePool }

// PoolOf reads a NodePool through karpenter.ReadNodePool: a limit or
// resources that are no quantity, or a consolidateAfter that is neither a
// duration nor Never, is an error.
func PoolOf(np *unstructured.Unstructured) (Pool, error) {
	r, err := karpenter.ReadNodePool(np)
	return Pool{r}, err
}

// RoomNodes is how many more whole nodes of nodeGPUs GPUs the pool's limit
// lets it add (unlimited is reported as max).
func (p Pool) RoomNodes(nodeGPUs, most int) int {
	if nodeGPUs <= 0 {
		return 0
	}
	room := p.RoomGPUs()
	if room < 0 {
		return most
	}
	return min(int(room)/nodeGPUs, most)
}

// MaxScaleUp is how many nodes a scale-up gang asks the autoscaler for at
// most: two show it adds several at once, and keep a real cluster's bill
// small.
const MaxScaleUp = 2

// ScaleUp sizes the scale-up gang: its workers each take a whole node, so
// it asks for the free whole nodes it may use plus new ones, as many as
// the pool's room, the run's budget (budget < 0: none) and MaxScaleUp
// allow. newNodes is 0 when none may be added (the scenario cannot run).
func ScaleUp(freeWhole, roomNodes, budget int) (workers, newNodes int) {
	newNodes = min(MaxScaleUp, roomNodes)
	if budget >= 0 {
		newNodes = min(newNodes, budget)
	}
	newNodes = max(newNodes, 0)
	return freeWhole + newNodes, newNodes
}

// TooBig sizes the gang no NodePool can fit, in whole-node workers of
// nodeGPUs: one node more than the free whole nodes it may use and all the
// pool's room, and also more GPUs than every matching node's free GPUs and
// the room together (what gpulab's operator judges a gang by: it does not
// read the pods' node affinity). roomGPUs < 0 (no limit) cannot be
// exceeded: 0.
func TooBig(freeWhole int, roomGPUs, clusterFreeGPUs int64, nodeGPUs int) int {
	if roomGPUs < 0 || nodeGPUs <= 0 {
		return 0
	}
	g := int64(nodeGPUs)
	byPool := int64(freeWhole) + roomGPUs/g + 1
	byCluster := (clusterFreeGPUs+roomGPUs)/g + 1
	return int(max(byPool, byCluster))
}

// ExtraNodes counts the nodes a scale-up added that hold none of the
// gang's pods once it is bound: what the autoscaler over-provisioned.
func ExtraNodes(added []string, holding map[string]bool) int {
	n := 0
	for _, node := range added {
		if !holding[node] {
			n++
		}
	}
	return n
}

// ScaleDownMargin is how long past a NodePool's consolidateAfter its empty
// nodes may take to go: Karpenter's disruption loop (every 10 s), its
// validation wait before acting (15 s) and the node's drain and delete.
const ScaleDownMargin = 60 * time.Second

// ScaleDownWindow is how long after a gang's deletion the nodes added for
// it must be gone: consolidateAfter plus ScaleDownMargin. A NodePool that
// never consolidates (negative) has none: ok is false.
func ScaleDownWindow(consolidateAfter time.Duration) (window time.Duration, ok bool) {
	if consolidateAfter < 0 {
		return 0, false
	}
	return consolidateAfter + ScaleDownMargin, true
}
