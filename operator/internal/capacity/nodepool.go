package capacity

import (
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpulab/gpulab/internal/gfd"
)

// NodePools turns Karpenter NodePools into the pools Grow judges: the GPU
// products their nodes may carry (the GFD product label, set on the
// template or required with In) and the GPUs their limits leave (the
// limit on nvidia.com/gpu less the GPUs of the nodes they have now). A
// NodePool being deleted adds nothing.
func NodePools(items []unstructured.Unstructured) []Pool {
	out := make([]Pool, 0, len(items))
	for i := range items {
		np := &items[i]
		if np.GetDeletionTimestamp() != nil {
			continue
		}
		p := Pool{Name: np.GetName(), Room: -1}
		if product, ok, _ := unstructured.NestedString(np.Object, "spec", "template", "metadata", "labels", gfd.Product); ok && product != "" {
			p.Products = []string{product}
		}
		reqs, _, _ := unstructured.NestedSlice(np.Object, "spec", "template", "spec", "requirements")
		for _, r := range reqs {
			req, ok := r.(map[string]any)
			if !ok || req["key"] != gfd.Product || req["operator"] != "In" {
				continue
			}
			values, _, _ := unstructured.NestedStringSlice(req, "values")
			p.Products = values
		}
		if limit, ok := quantity(np.Object, "spec", "limits", string(gfd.GPUResource)); ok {
			used, _ := quantity(np.Object, "status", "resources", string(gfd.GPUResource))
			p.Room = max(limit-used, 0)
		}
		out = append(out, p)
	}
	return out
}

// quantity reads a resource quantity at path, whole units.
func quantity(obj map[string]any, path ...string) (int64, bool) {
	s, ok, err := unstructured.NestedString(obj, path...)
	if !ok || err != nil {
		return 0, false
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, false
	}
	return q.Value(), true
}
