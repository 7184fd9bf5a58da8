package karpenter_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpulab/gpulab/internal/karpenter"
)

// nodePool builds a NodePool named gpu from its spec and status (nil:
// none).
func nodePool(spec, status map[string]any) *unstructured.Unstructured {
	obj := map[string]any{"metadata": map[string]any{"name": "gpu"}}
	if spec != nil {
		obj["spec"] = spec
	}
	if status != nil {
		obj["status"] = status
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(karpenter.NodePoolKind)
	return u
}

func limits(gpus any) map[string]any {
	return map[string]any{"nvidia.com/gpu": gpus, "cpu": "1000"}
}

func resources(gpus any) map[string]any {
	return map[string]any{"resources": map[string]any{"nvidia.com/gpu": gpus}}
}

func after(s string) map[string]any { return map[string]any{"consolidateAfter": s} }

func requirement(key, op string, values ...any) map[string]any {
	return map[string]any{"key": key, "operator": op, "values": values}
}

func template(labels map[string]any, reqs ...any) map[string]any {
	t := map[string]any{}
	if labels != nil {
		t["metadata"] = map[string]any{"labels": labels}
	}
	if reqs != nil {
		t["spec"] = map[string]any{"requirements": reqs}
	}
	return t
}

const (
	h100 = "NVIDIA-H100-80GB-HBM3"
	a100 = "NVIDIA-A100-SXM4-80GB"
)

func TestReadNodePool(t *testing.T) {
	deleting := nodePool(map[string]any{"limits": limits("16")}, nil)
	deleting.SetDeletionTimestamp(&metav1.Time{Time: time.Unix(1, 0)})
	for _, tc := range []struct {
		name string
		np   *unstructured.Unstructured
		want karpenter.NodePool
		// err: a substring of the error; empty: none.
		err string
	}{
		{"the local testbed's", nodePool(map[string]any{"limits": limits("16"), "disruption": after("30s")}, resources("8")),
			karpenter.NodePool{Name: "gpu", LimitGPUs: 16, UsedGPUs: 8, ConsolidateAfter: 30 * time.Second}, ""},
		{"no limit", nodePool(map[string]any{"disruption": after("1m")}, nil),
			karpenter.NodePool{Name: "gpu", LimitGPUs: -1, ConsolidateAfter: time.Minute}, ""},
		{"no limit on GPUs", nodePool(map[string]any{"limits": map[string]any{"cpu": "1000"}}, resources("8")),
			karpenter.NodePool{Name: "gpu", LimitGPUs: -1, UsedGPUs: 8}, ""},
		{"a limit that is a JSON number", nodePool(map[string]any{"limits": limits(int64(32))}, resources(float64(8))),
			karpenter.NodePool{Name: "gpu", LimitGPUs: 32, UsedGPUs: 8}, ""},
		{"used past the limit", nodePool(map[string]any{"limits": limits("8")}, resources("16")),
			karpenter.NodePool{Name: "gpu", LimitGPUs: 8, UsedGPUs: 16}, ""},
		{"products from the label", nodePool(map[string]any{"template": template(map[string]any{"nvidia.com/gpu.product": a100})}, nil),
			karpenter.NodePool{Name: "gpu", Products: []string{a100}, LimitGPUs: -1}, ""},
		{"products from an In requirement", nodePool(map[string]any{"template": template(nil,
			requirement("nvidia.com/gpu.product", "In", h100, a100),
			requirement("nvidia.com/gpu.product", "NotIn", "Tesla-T4"),
			requirement("karpenter.sh/capacity-type", "In", "on-demand"))}, nil),
			karpenter.NodePool{Name: "gpu", Products: []string{h100, a100}, LimitGPUs: -1}, ""},
		{"an In requirement over the label", nodePool(map[string]any{"template": template(map[string]any{"nvidia.com/gpu.product": a100},
			requirement("nvidia.com/gpu.product", "In", h100))}, nil),
			karpenter.NodePool{Name: "gpu", Products: []string{h100}, LimitGPUs: -1}, ""},
		{"never consolidates", nodePool(map[string]any{"disruption": after("Never")}, nil),
			karpenter.NodePool{Name: "gpu", LimitGPUs: -1, ConsolidateAfter: -1}, ""},
		{"consolidateAfter empty", nodePool(map[string]any{"disruption": after("")}, nil),
			karpenter.NodePool{Name: "gpu", LimitGPUs: -1}, ""},
		{"being deleted", deleting, karpenter.NodePool{Name: "gpu", LimitGPUs: 16, Deleting: true}, ""},
		// An error ends the read: what came before it is kept, what comes
		// after keeps its default.
		{"consolidateAfter bad", nodePool(map[string]any{"limits": limits("16"), "disruption": after("soon")}, resources("8")),
			karpenter.NodePool{Name: "gpu", LimitGPUs: 16, UsedGPUs: 8}, `NodePool gpu: consolidateAfter "soon" is neither a duration nor Never`},
		{"a limit that is no quantity", nodePool(map[string]any{"limits": limits("lots"), "disruption": after("30s")}, resources("8")),
			karpenter.NodePool{Name: "gpu", LimitGPUs: -1}, "NodePool gpu: spec.limits: "},
		{"a limit of the wrong type", nodePool(map[string]any{"limits": limits(true)}, nil),
			karpenter.NodePool{Name: "gpu", LimitGPUs: -1}, "NodePool gpu: spec.limits: true is not a quantity"},
		{"limits that are no object", nodePool(map[string]any{"limits": "16"}, nil),
			karpenter.NodePool{Name: "gpu", LimitGPUs: -1}, "NodePool gpu: spec.limits: "},
		{"resources that are no quantity", nodePool(map[string]any{"limits": limits("16"), "disruption": after("30s")}, resources("some")),
			karpenter.NodePool{Name: "gpu", LimitGPUs: 16}, "NodePool gpu: status.resources: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := karpenter.ReadNodePool(tc.np)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ReadNodePool = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseConsolidateAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "Never": -1, "": 0, "1h": time.Hour} {
		got, err := karpenter.ParseConsolidateAfter(in)
		if err != nil || got != want {
			t.Errorf("ParseConsolidateAfter(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1s", "never", "30"} {
		if _, err := karpenter.ParseConsolidateAfter(bad); err == nil {
			t.Errorf("ParseConsolidateAfter(%q) accepted", bad)
		}
	}
}
