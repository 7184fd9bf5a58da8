package gpucluster_test

import (
	"context"
	"flag"
	"fmt"
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

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	var err error
	env, err = envtest.Start(context.Background(), envtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := testutil.CreateGPUNodes(context.Background(), env.Client, 4); err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func needEnv(t *testing.T) client.Client {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	return env.Client
}
