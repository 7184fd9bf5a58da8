package gpucluster_test

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/operator/internal/testutil"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

const h100 = testutil.H100

// env is one API server (with Volcano's CRDs, without Volcano running) for
// the package. Tests play the scheduler and kubelet where they need to.
var env *envtest.Environment

func TestMain(m *testing.M) { os.Exit(testutil.RunWithEnv(m, &env)) }

func needEnv(t *testing.T) client.Client {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	return env.Client
}
