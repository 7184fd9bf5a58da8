package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/karpenter"
)

func TestPhaseGaugeFollowsObjects(t *testing.T) {
	m := NewClusters(prometheus.NewRegistry())
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	m.SetPhase(a, "Pending")
	m.SetPhase(b, "Pending")
	m.SetPhase(a, "Ready")
	m.SetPhase(a, "Ready")
	if got := testutil.ToFloat64(m.phases.gauge.WithLabelValues("Pending")); got != 1 {
		t.Errorf("Pending = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.phases.gauge.WithLabelValues("Ready")); got != 1 {
		t.Errorf("Ready = %v, want 1", got)
	}
	m.Forget(a)
	m.Forget(a)
	if got := testutil.ToFloat64(m.phases.gauge.WithLabelValues("Ready")); got != 0 {
		t.Errorf("Ready after delete = %v, want 0", got)
	}
	if got := testutil.CollectAndCount(m.unschedulable); got != 2 {
		t.Errorf("%d unschedulable series at start, want both known reasons at 0", got)
	}
}

// Every phase is served from the start, at zero: a phase an object passes
// through between two scrapes (Provisioning, when status writes coalesce)
// still has a series, and rate() and the dashboards see its first change.
func TestEveryPhaseStartsAtZero(t *testing.T) {
	clusters, jobs := NewClusters(prometheus.NewRegistry()), NewJobs(prometheus.NewRegistry())
	if got := testutil.CollectAndCount(clusters.phases.gauge); got != 8 {
		t.Errorf("%d GPUCluster phase series at start, want all 8 phases at 0", got)
	}
	if got := testutil.CollectAndCount(jobs.phases.gauge); got != 6 {
		t.Errorf("%d GPUJob phase series at start, want all 6 phases at 0", got)
	}
	for _, phase := range []string{"Provisioning", "WaitingForNodes"} {
		if got := testutil.ToFloat64(clusters.phases.gauge.WithLabelValues(phase)); got != 0 {
			t.Errorf("%s = %v at start, want 0", phase, got)
		}
	}
}

// gpulab_nodes follows the watch's events: a node counts once, in the
// class its last event gave it (GPUs from allocatable or GFD's product
// label, autoscaled from Karpenter's label), and leaves when deleted.
func TestNodeGaugeFollowsNodes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewClusters(reg)
	h := m.NodeEvents()
	node := func(name string, gpus string, labels map[string]string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if gpus != "" {
			n.Status.Allocatable = corev1.ResourceList{gfd.GPUResource: resource.MustParse(gpus)}
		}
		return n
	}
	count := func(gpu, autoscaled string) float64 {
		return testutil.ToFloat64(m.nodes.gauge.WithLabelValues(gpu, autoscaled))
	}
	if got := testutil.CollectAndCount(m.nodes.gauge); got != 4 {
		t.Errorf("%d gpulab_nodes series at start, want all 4 classes at 0", got)
	}
	ctx := t.Context()
	cpu := node("cpu", "", nil)
	plugin := node("plugin", "8", map[string]string{gfd.Product: "NVIDIA-H100-80GB-HBM3"})
	dra := node("dra", "", map[string]string{gfd.Product: "NVIDIA-H100-80GB-HBM3"})
	added := node("added", "", map[string]string{karpenter.NodePoolLabel: "gpu"})
	for _, n := range []*corev1.Node{cpu, plugin, dra, added} {
		h.Create(ctx, event.CreateEvent{Object: n}, nil)
	}
	// Karpenter's node gets its GPUs when the device plugin registers; a
	// heartbeat changes nothing.
	ready := node("added", "8", map[string]string{karpenter.NodePoolLabel: "gpu"})
	h.Update(ctx, event.UpdateEvent{ObjectOld: added, ObjectNew: ready}, nil)
	h.Update(ctx, event.UpdateEvent{ObjectOld: ready, ObjectNew: ready}, nil)
	h.Update(ctx, event.UpdateEvent{ObjectOld: cpu, ObjectNew: cpu}, nil)
	for _, c := range []struct {
		gpu, autoscaled string
		want            float64
	}{{"false", "false", 1}, {"true", "false", 2}, {"false", "true", 0}, {"true", "true", 1}} {
		if got := count(c.gpu, c.autoscaled); got != c.want {
			t.Errorf("gpulab_nodes{gpu=%q, autoscaled=%q} = %v, want %v", c.gpu, c.autoscaled, got, c.want)
		}
	}
	h.Delete(ctx, event.DeleteEvent{Object: plugin}, nil)
	h.Delete(ctx, event.DeleteEvent{Object: plugin}, nil)
	h.Delete(ctx, event.DeleteEvent{Object: ready}, nil)
	want := `
# HELP gpulab_nodes Nodes the operator sees, by whether they have GPUs (allocatable nvidia.com/gpu or a GFD product label) and whether an autoscaler added them (Karpenter's karpenter.sh/nodepool label).
# TYPE gpulab_nodes gauge
gpulab_nodes{autoscaled="false",gpu="false"} 1
gpulab_nodes{autoscaled="false",gpu="true"} 1
gpulab_nodes{autoscaled="true",gpu="false"} 0
gpulab_nodes{autoscaled="true",gpu="true"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpulab_nodes"); err != nil {
		t.Errorf("after deleting the plugin's and Karpenter's nodes: %v", err)
	}
}
