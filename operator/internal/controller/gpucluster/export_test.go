package gpucluster

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// PodTurned is the pod update classifier of a reconciler that reads c.
func PodTurned(c client.Client) func(context.Context, event.UpdateEvent) bool {
	return (&Reconciler{client: c}).podTurned
}
