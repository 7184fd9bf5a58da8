package simulator_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/node-agent/simulator"
	"github.com/gpulab/gpulab/testbeds/envtest"
	"github.com/gpulab/gpulab/testbeds/local"
)

// TestDRASlices: with a DRA driver the simulator publishes each fake node's
// GPUs as one pool named after the node, in a ResourceSlice the real API
// server accepts, with NVIDIA's attribute names; a GPU that turns
// Unhealthy leaves the slice.
func TestDRASlices(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := resourceapi.AddToScheme(env.Client.Scheme()); err != nil {
		t.Fatal(err)
	}
	fleet, err := local.ParseFleet("dgx-h200=1")
	if err != nil {
		t.Fatal(err)
	}
	node := fleet.Nodes()[0]
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- simulator.Run(runCtx, simulator.Options{Config: env.Config, Interval: time.Hour, DRADriver: "gpu.gpulab.io"})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	slice := func() *resourceapi.ResourceSlice {
		var l resourceapi.ResourceSliceList
		if err := env.Client.List(ctx, &l); err != nil || len(l.Items) != 1 {
			return nil
		}
		return &l.Items[0]
	}
	var s *resourceapi.ResourceSlice
	eventually(t, "a slice with the node's 8 GPUs", func() bool {
		s = slice()
		return s != nil && len(s.Spec.Devices) == 8
	})
	if s.Spec.Driver != "gpu.gpulab.io" || s.Spec.Pool.Name != node.Name || s.Spec.NodeName == nil || *s.Spec.NodeName != node.Name {
		t.Errorf("slice spec: driver %q, pool %q, node %v", s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].Name != node.Name {
		t.Errorf("slice owners: %+v", s.OwnerReferences)
	}
	d := s.Spec.Devices[0]
	str := func(name string) string {
		a := d.Attributes[resourceapi.QualifiedName(name)]
		switch {
		case a.StringValue != nil:
			return *a.StringValue
		case a.VersionValue != nil:
			return *a.VersionValue
		}
		return "<none>"
	}
	for name, want := range map[string]string{"type": "gpu", "productName": "NVIDIA H200", "architecture": "Hopper", "cudaComputeCapability": "9.0.0"} {
		if got := str(name); d.Name != "gpu-0" || got != want {
			t.Errorf("%s: %s %q, want %q", d.Name, name, got, want)
		}
	}
	if m := d.Capacity["memory"].Value; m.Value() != fleet[0].Profile.MemoryMiB<<20 {
		t.Errorf("device 0 memory %s, want %d MiB", m.String(), fleet[0].Profile.MemoryMiB)
	}

	var n corev1.Node
	if err := env.Client.Get(ctx, client.ObjectKey{Name: node.Name}, &n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[simulator.XIDAnnotation] = "3:79"
	if err := env.Client.Patch(ctx, &n, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU 3 to leave the slice", func() bool {
		s = slice()
		if s == nil || len(s.Spec.Devices) != 7 {
			return false
		}
		for _, d := range s.Spec.Devices {
			if d.Name == "gpu-3" {
				return false
			}
		}
		return true
	})
}
