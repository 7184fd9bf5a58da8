package sidebyside

import "testing"

func TestProcessCPUTable(t *testing.T) {
	p := processCPU{}
	p.add(floorSide, map[string]float64{"kube-apiserver": 30, "etcd": 4})
	p.add(floorSide, map[string]float64{"kube-apiserver": 36, "etcd": 5})
	p.add(gpulabSide, map[string]float64{"kube-apiserver": 41, "gpulab-operator": 6})
	want := "| PROCESS | floor | gpulab | KubeRay |\n|---|---|---|---|\n" +
		"| etcd | 4–5 | - | - |\n" +
		"| gpulab-operator | - | 6 | - |\n" +
		"| kube-apiserver | 30–36 | 41 | - |\n"
	if got := p.markdown(Operators.Sides); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}
