package capacity_test

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/operator/internal/capacity"
)

func TestGrow(t *testing.T) {
	h100 := capacity.Selector{Product: "NVIDIA-H100-80GB-HBM3"}
	nodes := []capacity.Node{{Name: "n1", Product: h100.Product, Healthy: 8}}
	// Three 8-GPU pods on one 8-GPU node: two pods, 16 GPUs, lacking.
	gang := []capacity.Demand{{Group: "workers", Selector: h100, GPUsPerPod: 8, Pods: 3}}
	cases := []struct {
		name       string
		pools      []capacity.Pool
		undeclared bool
		demands    []capacity.Demand
		grows      bool
		says       string
	}{
		{"room for exactly what lacks", []capacity.Pool{{Name: "gpu", Room: 16}}, false, gang, true, "16 NVIDIA-H100-80GB-HBM3 GPUs"},
		{"room summed over pools", []capacity.Pool{{Name: "a", Room: 8}, {Name: "b", Room: 8}}, false, gang, true, "NodePool a, b"},
		{"no limit", []capacity.Pool{{Name: "gpu", Room: -1}}, false, gang, true, "NodePool gpu"},
		{"limits too small", []capacity.Pool{{Name: "gpu", Room: 8}}, false, gang, false, "can add at most 8"},
		{"another product", []capacity.Pool{{Name: "a100", Products: []string{"NVIDIA-A100-SXM4-80GB"}, Room: -1}}, false, gang, false, "no NodePool offers"},
		{"no pool at all", nil, false, gang, false, "no NodePool offers"},
		{"undeclared autoscaler", nil, true, gang, true, "Autoscaled"},
		// 4-GPU pods fit the node's 8 twice, but 24 GPUs exceed its 8.
		{"short in total", []capacity.Pool{{Name: "gpu", Room: 16}}, false,
			[]capacity.Demand{{Group: "w", Selector: h100, GPUsPerPod: 4, Pods: 6}}, true, "16 NVIDIA-H100-80GB-HBM3 GPUs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := capacity.Grow(nodes, c.pools, c.demands, c.undeclared)
			if v.Fits || v.Grows != c.grows || !strings.Contains(v.Message, c.says) {
				t.Errorf("verdict %+v: want grows=%v, a message that says %q", v, c.grows, c.says)
			}
			want := gpulabv1alpha1.ReasonNoNodePoolFits
			if c.grows {
				want = gpulabv1alpha1.ReasonWaitingForNodes
			}
			if v.Reason != want {
				t.Errorf("reason %q, want %q", v.Reason, want)
			}
		})
	}
}

func TestNodePools(t *testing.T) {
	np := func(name string, obj map[string]any) unstructured.Unstructured {
		u := unstructured.Unstructured{Object: obj}
		u.SetGroupVersionKind(karpenter.NodePoolKind)
		u.SetName(name)
		return u
	}
	pools := capacity.NodePools([]unstructured.Unstructured{
		np("limited", map[string]any{
			"spec": map[string]any{
				"limits": map[string]any{"nvidia.com/gpu": "16", "cpu": "1000"},
				"template": map[string]any{"spec": map[string]any{"requirements": []any{
					map[string]any{"key": "nvidia.com/gpu.product", "operator": "In", "values": []any{"NVIDIA-H100-80GB-HBM3"}},
				}}},
			},
			"status": map[string]any{"resources": map[string]any{"nvidia.com/gpu": "8"}},
		}),
		np("labelled", map[string]any{"spec": map[string]any{
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}},
		}}),
		np("full", map[string]any{
			"spec":   map[string]any{"limits": map[string]any{"nvidia.com/gpu": "8"}},
			"status": map[string]any{"resources": map[string]any{"nvidia.com/gpu": "16"}},
		}),
	})
	want := []capacity.Pool{
		{Name: "limited", Products: []string{"NVIDIA-H100-80GB-HBM3"}, Room: 8},
		{Name: "labelled", Products: []string{"NVIDIA-A100-SXM4-80GB"}, Room: -1},
		{Name: "full", Room: 0},
	}
	if !reflect.DeepEqual(pools, want) {
		t.Errorf("pools %+v, want %+v", pools, want)
	}
}
