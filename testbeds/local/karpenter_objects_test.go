package local

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestKarpenterObjectsWaitForDiscovery: an Established CRD whose kind the
// API server's discovery does not serve yet (seen under load: "no matches
// for kind KWOKNodeClass") is asked for again, not a failed testbed; any
// other error still fails at once.
func TestKarpenterObjectsWaitForDiscovery(t *testing.T) {
	fleet, err := ParseFleet("dgx-h100=1")
	if err != nil {
		t.Fatal(err)
	}
	applies := 0
	lagging := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			applies++
			if applies <= 2 {
				return &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "karpenter.kwok.sh", Kind: "KWOKNodeClass"}}
			}
			return nil
		},
	})
	if err := applyKarpenterObjects(t.Context(), lagging, fleet, 8); err != nil {
		t.Fatalf("discovery that catches up: %v", err)
	}
	if applies != 4 {
		t.Errorf("%d applies, want 4 (two refused, then the NodeClass and the NodePool)", applies)
	}

	refused := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return context.DeadlineExceeded
		},
	})
	if err := applyKarpenterObjects(t.Context(), refused, fleet, 8); err == nil {
		t.Error("an apply that fails for another reason: no error")
	}
}
