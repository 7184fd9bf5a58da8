package testbed_test

import (
	"context"
	"testing"

	"github.com/gpulab/gpulab/testbeds/kind"
	"github.com/gpulab/gpulab/testbeds/local"
	"github.com/gpulab/gpulab/testbeds/testbed"
)

// Each implementation asserts it in its own package too; this names them
// in one place.
var (
	_ testbed.Testbed = (*local.Testbed)(nil)
	_ testbed.Testbed = (*kind.Cluster)(nil)
	_ testbed.Testbed = testbed.Existing{}
)

func TestExistingIsLeftAlone(t *testing.T) {
	var tb testbed.Testbed = testbed.Existing{ClusterName: "prod", Path: "/home/u/.kube/config"}
	if tb.Name() != "prod" || tb.Kubeconfig() != "/home/u/.kube/config" {
		t.Fatalf("Name, Kubeconfig = %q, %q", tb.Name(), tb.Kubeconfig())
	}
	ctx := context.Background()
	for name, f := range map[string]func(context.Context) error{"Up": tb.Up, "WaitReady": tb.WaitReady, "Down": tb.Down} {
		if err := f(ctx); err != nil {
			t.Errorf("%s on an existing cluster: %v", name, err)
		}
	}
}
