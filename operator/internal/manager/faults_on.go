//go:build gpulab_faults

package manager

import (
	"os"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/operator/internal/faults"
)

// newClient plants the fault named by GPULAB_PLANTED_FAULT in the
// manager's client. Only test builds (-tags gpulab_faults) have it.
func newClient() (client.NewClientFunc, error) {
	return faults.NewClientFunc(os.Getenv(faults.EnvVar))
}
