package publisher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

// runningAgent is one run of the agent of a node: its own mock NVML and
// publisher, as after a process restart.
type runningAgent struct {
	backend   *mock.Backend
	published atomic.Int64
	stop      func()
}

func startNodeAgent(t *testing.T, node string) *runningAgent {
	t.Helper()
	b, err := mock.New("dgx-h100", node, nvml.Options{EventWaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := &runningAgent{backend: b}
	a, err := agent.New(b, agent.Options{
		NodeName: node, Interval: time.Hour, Publisher: publisher.New(admin, publisher.Options{LabelNode: true}),
		OnPublished: func() { r.published.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	var once atomic.Bool
	r.stop = func() {
		if once.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(r.stop)
	eventually(t, "the agent's first publish", func() bool { return r.published.Load() > 0 })
	return r
}

// TestStickyHealthSurvivesRestart: an XID makes a GPU Unhealthy; a new agent
// on the same node (same GPU UUIDs) publishes it Unhealthy still; only the
// clear-health annotation makes it Healthy, and the agent then removes the
// annotation.
func TestStickyHealthSurvivesRestart(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "sticky-node", nil)
	inv := &v1alpha1.GPUInventory{}
	get := func() bool { return e.Client.Get(ctx(t), client.ObjectKey{Name: node.Name}, inv) == nil }

	first := startNodeAgent(t, node.Name)
	if err := first.backend.InjectXID(3, 79); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU 3 to be Unhealthy", func() bool { return get() && inv.Status.Summary.Healthy == 7 })
	before := inv.Status.GPUs[3].Health
	if !before.Sticky || before.Reason != "XidCriticalError" || before.Since == nil {
		t.Fatalf("GPU 3 after XID 79: %+v", before)
	}
	first.stop()

	second := startNodeAgent(t, node.Name)
	if second.backend.UUID(3) != first.backend.UUID(3) {
		t.Fatalf("the mock's UUIDs must be stable per node: %s, then %s", first.backend.UUID(3), second.backend.UUID(3))
	}
	if !get() {
		t.Fatal("no GPUInventory")
	}
	after := inv.Status.GPUs[3].Health
	if after.State != v1alpha1.GPUUnhealthy || !after.Sticky || after.Reason != "XidCriticalError" ||
		after.LastXID == nil || *after.LastXID != 79 || after.Since == nil || !after.Since.Equal(before.Since) {
		t.Errorf("GPU 3 after the restart: %+v, want %+v", after, before)
	}
	if s := inv.Status.Summary; s.Count != 8 || s.Healthy != 7 {
		t.Errorf("summary after the restart: %+v", s)
	}

	// Only the annotation clears it.
	patch := client.MergeFrom(inv.DeepCopy())
	inv.Annotations = map[string]string{v1alpha1.ClearHealthAnnotation: second.backend.UUID(3)}
	if err := e.Client.Patch(ctx(t), inv, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU 3 Healthy and the annotation removed", func() bool {
		_, annotated := inv.Annotations[v1alpha1.ClearHealthAnnotation]
		return get() && !annotated && inv.Status.GPUs[3].Health.State == v1alpha1.GPUHealthy
	})
	if h := inv.Status.GPUs[3].Health; h.Sticky || h.LastXID != nil || inv.Status.Summary.Healthy != 8 {
		t.Errorf("GPU 3 after the clear: %+v (healthy %d)", h, inv.Status.Summary.Healthy)
	}

	// "all" clears every GPU, also after another restart.
	if err := second.backend.InjectXID(1, 48); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU 1 to be Unhealthy", func() bool { return get() && inv.Status.Summary.Healthy == 7 })
	second.stop()
	patch = client.MergeFrom(inv.DeepCopy())
	inv.Annotations = map[string]string{v1alpha1.ClearHealthAnnotation: "all"}
	if err := e.Client.Patch(ctx(t), inv, patch); err != nil {
		t.Fatal(err)
	}
	startNodeAgent(t, node.Name)
	eventually(t, "every GPU Healthy and the annotation removed", func() bool {
		_, annotated := inv.Annotations[v1alpha1.ClearHealthAnnotation]
		return get() && !annotated && inv.Status.Summary.Healthy == 8
	})
}
