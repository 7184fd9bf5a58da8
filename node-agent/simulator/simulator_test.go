package simulator_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/poll/polltest"
	"github.com/gpulab/gpulab/node-agent/simulator"
	"github.com/gpulab/gpulab/testbeds/envtest"
	"github.com/gpulab/gpulab/testbeds/local"
)

// eventually waits for cond, failing the test after 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, what, cond)
}

// TestFleet runs the simulator against the local testbed's own fake nodes:
// every node gets the inventory and labels its profile promises.
func TestFleet(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fleet, err := local.ParseFleet("dgx-a100=1,dgx-h200=2")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range fleet.Nodes() {
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// A node that is not a fake GPU node is left alone.
	plain := &corev1.Node{}
	plain.Name = "cpu-node"
	if err := env.Client.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	ready := make(chan int, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- simulator.Run(runCtx, simulator.Options{
			Config: env.Config, Interval: time.Hour, LabelNodes: true, AdvertiseCapacity: true,
			Registerer: reg, Ready: func(n int) { ready <- n },
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case n := <-ready:
		if n != 3 {
			t.Errorf("simulating %d nodes, want 3", n)
		}
	case <-ctx.Done():
		t.Fatal("simulator never became ready")
	}

	for _, e := range fleet {
		for i := range e.Count {
			name := e.Profile.Name + "-" + string(rune('0'+i))
			want := e.Profile.Labels(name)
			var inv v1alpha1.GPUInventory
			eventually(t, "the inventory of "+name, func() bool {
				return env.Client.Get(ctx, client.ObjectKey{Name: name}, &inv) == nil
			})
			s := inv.Status.Summary
			if s.Count != int32(e.Profile.GPUs) || s.Healthy != s.Count || s.Product != e.Profile.Product || s.MemoryMiB != e.Profile.MemoryMiB {
				t.Errorf("%s: summary %+v does not match profile %+v", name, s, e.Profile)
			}
			var n corev1.Node
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.family", "nvidia.com/gpu.count", "nvidia.com/cuda.driver-version.full"} {
				if n.Labels[k] != want[k] {
					t.Errorf("%s: label %s = %q, want %q", name, k, n.Labels[k], want[k])
				}
			}
		}
	}
	var none v1alpha1.GPUInventory
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "cpu-node"}, &none); err == nil {
		t.Error("a node without the profile label got an inventory")
	}

	// Fault injection through the node annotation.
	var n corev1.Node
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "dgx-h200-1"}, &n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Annotations[simulator.XIDAnnotation] = "2:79,5:13"
	if err := env.Client.Patch(ctx, &n, patch); err != nil {
		t.Fatal(err)
	}
	var inv v1alpha1.GPUInventory
	eventually(t, "GPU 2 of dgx-h200-1 to turn Unhealthy", func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Name: "dgx-h200-1"}, &inv) == nil && inv.Status.Summary.Healthy == 7
	})
	if h := inv.Status.GPUs[2].Health; h.Reason != "XidCriticalError" || *h.LastXID != 79 {
		t.Errorf("GPU 2: %+v", h)
	}
	if h := inv.Status.GPUs[5].Health; h.State != v1alpha1.GPUHealthy {
		t.Errorf("GPU 5 got an application XID and must stay healthy: %+v", h)
	}
	eventually(t, "capacity to follow the healthy count", func() bool {
		_ = env.Client.Get(ctx, client.ObjectKey{Name: "dgx-h200-1"}, &n)
		q := n.Status.Capacity[local.GPUResource]
		return q.Value() == 7
	})

	// A node added later is picked up; a deleted one is dropped.
	late := fleet[0].Profile.Node("dgx-a100-late")
	if err := env.Client.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the inventory of a node created after start", func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Name: "dgx-a100-late"}, &inv) == nil
	})
	if err := env.Client.Delete(ctx, late); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted node's metrics to go", func() bool {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "hostname" && l.GetValue() == "dgx-a100-late" {
						return false
					}
				}
			}
		}
		return true
	})
}
