//go:build !gpulab_faults

package manager

import "sigs.k8s.io/controller-runtime/pkg/client"

// newClient is nil, controller-runtime's default client: real builds never
// link the fault interceptor (operator/internal/faults).
func newClient() (client.NewClientFunc, error) { return nil, nil }
