package karpenter

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpulab/gpulab/internal/gfd"
)

// NodePool is what gpulab reads of a Karpenter NodePool: the operator the
// GPUs it may still add and their products, the autoscaling feature its
// limit, what it holds and how soon it consolidates.
type NodePool struct {
	Name string
	// Products are the GFD products its nodes may carry: the product label
	// on spec.template, or the values of an In requirement on it (the
	// last such requirement wins). Empty: any.
	Products []string
	// LimitGPUs is spec.limits' nvidia.com/gpu; negative: no limit.
	LimitGPUs int64
	// UsedGPUs is status.resources' nvidia.com/gpu: what its nodes hold.
	UsedGPUs int64
	// ConsolidateAfter is spec.disruption.consolidateAfter; negative:
	// Never (the NodePool never removes a node for being empty).
	ConsolidateAfter time.Duration
	// Deleting: the NodePool has a deletion timestamp.
	Deleting bool
}

// ReadNodePool reads a NodePool. Name, Deleting and Products never fail
// (a product label or requirement of the wrong shape is not read); the
// rest is read in order, LimitGPUs, UsedGPUs, ConsolidateAfter, and the
// first that is not readable ends the read with an error that names the
// NodePool and the field. The NodePool returned with an error holds what
// was read before it; the fields after it keep their defaults: no limit,
// nothing used, 0s.
//
// A quantity is a string Kubernetes parses or a JSON number (Karpenter's
// CRD takes either; see quantity).
func ReadNodePool(np *unstructured.Unstructured) (NodePool, error) {
	p := NodePool{Name: np.GetName(), LimitGPUs: -1, Deleting: np.GetDeletionTimestamp() != nil}
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
	gpus := string(gfd.GPUResource)
	if q, ok, err := quantity(np.Object, "spec", "limits", gpus); err != nil {
		return p, fmt.Errorf("NodePool %s: spec.limits: %w", p.Name, err)
	} else if ok {
		p.LimitGPUs = q
	}
	if q, ok, err := quantity(np.Object, "status", "resources", gpus); err != nil {
		return p, fmt.Errorf("NodePool %s: status.resources: %w", p.Name, err)
	} else if ok {
		p.UsedGPUs = q
	}
	after, _, _ := unstructured.NestedString(np.Object, "spec", "disruption", "consolidateAfter")
	d, err := ParseConsolidateAfter(after)
	if err != nil {
		return p, fmt.Errorf("NodePool %s: %w", p.Name, err)
	}
	p.ConsolidateAfter = d
	return p, nil
}

// RoomGPUs is the GPUs the limit leaves beyond what the NodePool's nodes
// hold (none when they hold more), or -1 with no limit.
func (p NodePool) RoomGPUs() int64 {
	if p.LimitGPUs < 0 {
		return -1
	}
	return max(p.LimitGPUs-p.UsedGPUs, 0)
}

// ParseConsolidateAfter reads spec.disruption.consolidateAfter: a Go
// duration, or Never (negative). Karpenter's API makes it required; an
// empty one is read as 0s, its default in the CRD.
func ParseConsolidateAfter(s string) (time.Duration, error) {
	switch s {
	case "Never":
		return -1, nil
	case "":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("consolidateAfter %q is neither a duration nor Never", s)
	}
	return d, nil
}

// quantity reads the resource quantity at path in whole units: a string
// Kubernetes parses (a fraction rounded up), or a JSON number (a fraction
// dropped). ok is false where nothing is at path; err is set where
// something is that is no quantity, or where a field on the way is not an
// object.
func quantity(obj map[string]any, path ...string) (n int64, ok bool, err error) {
	v, ok, err := unstructured.NestedFieldNoCopy(obj, path...)
	if !ok || err != nil {
		return 0, false, err
	}
	var text string
	switch v := v.(type) {
	case string:
		text = v
	case int64:
		return v, true, nil
	case float64:
		return int64(v), true, nil
	default:
		return 0, false, fmt.Errorf("%v is not a quantity", v)
	}
	q, err := resource.ParseQuantity(text)
	if err != nil {
		return 0, false, err
	}
	return q.Value(), true, nil
}
