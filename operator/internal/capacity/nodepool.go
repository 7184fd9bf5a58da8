package capacity

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpulab/gpulab/internal/karpenter"
)

// NodePools turns Karpenter NodePools into the pools Grow judges: the GPU
// products their nodes may carry (the GFD product label, set on the
// template or required with In) and the GPUs their limits leave (the
// limit on nvidia.com/gpu less the GPUs of the nodes they have now). A
// NodePool being deleted adds nothing.
//
// The NodePools are read with karpenter.ReadNodePool, and one it cannot
// wholly read still counts, with what it read (as before the reader was
// shared): an unreadable limit is no limit (Room -1, whatever it holds),
// an unreadable status.resources holds no GPUs (Room is the whole limit),
// and a consolidateAfter that is neither a duration nor Never is not
// looked at. A limit or resources written as a JSON number (Karpenter's
// CRD takes an integer or a string) is read as that number.
func NodePools(items []unstructured.Unstructured) []Pool {
	out := make([]Pool, 0, len(items))
	for i := range items {
		np, _ := karpenter.ReadNodePool(&items[i]) // with what it read: see above
		if np.Deleting {
			continue
		}
		out = append(out, Pool{Name: np.Name, Products: np.Products, Room: np.RoomGPUs()})
	}
	return out
}
