package publisher_test

import (
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

// gfdLabels are the node's nvidia.com/ labels.
func gfdLabels(t *testing.T, c client.Client, node string) map[string]string {
	t.Helper()
	var n corev1.Node
	if err := c.Get(ctx(t), client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range n.Labels {
		if strings.HasPrefix(k, "nvidia.com/") {
			out[k] = v
		}
	}
	return out
}

// TestFailedScanKeepsNodeLabels: an agent restarted on a node whose NVML
// fails publishes the failure but leaves the GFD labels of the last run
// alone (it applies none before a scan succeeded); a good scan applies them,
// and a later failed scan removes none.
func TestFailedScanKeepsNodeLabels(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "failed-scan-node", map[string]string{"team": "ml"})
	first := startNodeAgent(t, node.Name)
	before := gfdLabels(t, e.Client, node.Name)
	if before["nvidia.com/gpu.count"] != "8" {
		t.Fatalf("the first run's labels: %v", before)
	}
	first.stop()

	b, err := mock.New("dgx-h100", node.Name, nvml.Options{EventWaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.FailDeviceCount(gonvml.ERROR_UNKNOWN)
	m := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	var published atomic.Int64
	a, err := agent.New(b, agent.Options{
		NodeName: node.Name, Interval: time.Hour, Metrics: m,
		Publisher:   publisher.New(admin, publisher.Options{LabelNode: true, Metrics: m}),
		OnPublished: func() { published.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, "the publish of the failed first scan", func() bool { return published.Load() == 1 })
	if got := gfdLabels(t, e.Client, node.Name); !maps.Equal(got, before) {
		t.Errorf("a failed first scan changed the GFD labels: %v, want %v", got, before)
	}
	if w := counter(m.Writes.WithLabelValues(publisher.ObjectLabels)); w != 0 {
		t.Errorf("%v label writes before a scan succeeded, want 0", w)
	}

	b.FailDeviceCount(gonvml.SUCCESS)
	a.Rescan()
	eventually(t, "the publish of a good scan", func() bool { return published.Load() == 2 })
	if got := gfdLabels(t, e.Client, node.Name); !maps.Equal(got, before) {
		t.Errorf("labels after a good scan: %v, want %v", got, before)
	}

	b.FailDeviceCount(gonvml.ERROR_UNKNOWN)
	n := published.Load()
	a.Rescan()
	eventually(t, "the publish of another failed scan", func() bool { return published.Load() > n })
	if got := gfdLabels(t, e.Client, node.Name); !maps.Equal(got, before) {
		t.Errorf("a failed scan changed the GFD labels: %v, want %v", got, before)
	}
}
