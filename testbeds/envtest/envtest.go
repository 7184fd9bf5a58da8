// Package envtest starts a real etcd and kube-apiserver (controller-runtime's
// envtest) from the binaries the local testbed builds, with gpulab's and
// Volcano's CRDs installed. Controller and API tests share it.
package envtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/internal/scheme"
	"github.com/gpulab/gpulab/testbeds/binaries"
)

// Options configures an Environment.
type Options struct {
	// CRDDirs are installed before Start returns. Defaults to gpulab's CRDs
	// (operator/config/crd/bases) plus Volcano's scheduling CRDs.
	CRDDirs []string
	// ExtraCRDDirs are installed too, after CRDDirs (or their default).
	ExtraCRDDirs []string
}

// Environment is a running API server with a client that knows gpulab's,
// Volcano's and Kubernetes' kinds.
type Environment struct {
	Config *rest.Config
	Client client.Client
	env    *crenvtest.Environment
}

// Start starts etcd and kube-apiserver. KUBEBUILDER_ASSETS wins when set;
// otherwise the binaries come from the testbed cache, which must have been
// built (`make testbed-binaries`).
func Start(ctx context.Context, opts Options) (*Environment, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	var set *binaries.Set
	if assets == "" || len(opts.CRDDirs) == 0 {
		var err error
		set, err = binaries.Lookup(ctx, binaries.Options{})
		if err != nil {
			return nil, err
		}
	}
	if assets == "" {
		cache, err := binaries.DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		if assets, err = set.EnvtestAssets(cache); err != nil {
			return nil, err
		}
	}
	if len(opts.CRDDirs) == 0 {
		root, err := repo.Root()
		if err != nil {
			return nil, err
		}
		opts.CRDDirs = []string{
			filepath.Join(root, "operator", "config", "crd", "bases"),
			filepath.Join(set.VolcanoModuleDir, "config", "crd", "volcano", "bases"),
		}
	}
	env := newEnvironment(assets, append(slices.Clone(opts.CRDDirs), opts.ExtraCRDDirs...))
	cfg, err := env.Start()
	if err != nil {
		// Start leaves etcd and the API server running when a later step
		// (installing CRDs) fails; nobody else will stop them.
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the half-started control plane: %w", stopErr))
		}
		return nil, fmt.Errorf("starting envtest (assets %s): %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Environment{Config: cfg, Client: c, env: env}, nil
}

// crdsServedTimeout bounds the wait until the API server serves the
// installed CRDs. controller-runtime's default, 10 s, ran out once in
// `make test` ("waiting for CRDs to appear as API resources: context
// deadline exceeded"): four test packages, their API servers and the
// suite's testbed share two cores there, and gpulab's CRDs, which embed
// pod templates, take the API server a while to build. A server that
// never serves them still fails, after this long.
const crdsServedTimeout = 2 * time.Minute

// newEnvironment is the controller-runtime environment Start runs: the
// binaries in assets, the CRDs of crdDirs, gpulab's scheme.
func newEnvironment(assets string, crdDirs []string) *crenvtest.Environment {
	return &crenvtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme.Scheme,
		CRDInstallOptions:     crenvtest.CRDInstallOptions{Scheme: scheme.Scheme, MaxTime: crdsServedTimeout},
	}
}

// AsUser is a config for another user of this API server (a client
// certificate for name in groups), whom RBAC authorizes like anyone else:
// tests run code under exactly the roles they bind.
func (e *Environment) AsUser(name string, groups ...string) (*rest.Config, error) {
	u, err := e.env.AddUser(crenvtest.User{Name: name, Groups: groups}, e.Config)
	if err != nil {
		return nil, fmt.Errorf("envtest user %s: %w", name, err)
	}
	return u.Config(), nil
}

// Stop stops the API server and etcd.
func (e *Environment) Stop() error { return e.env.Stop() }

// StartForTest starts an Environment for one test (or TestMain through a
// testing.TB), stops it on cleanup, and fails the test if it cannot start.
// Tests that need it are skipped under -short.
func StartForTest(tb testing.TB, opts Options) *Environment {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a real kube-apiserver; skipped with -short")
	}
	// envtest installs CRDs through controller-runtime's global logger,
	// which prints a stack trace when no one set it; tests read their own.
	ctrllog.SetLogger(logr.Discard())
	e, err := Start(context.Background(), opts)
	if err != nil {
		tb.Fatalf("envtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := e.Stop(); err != nil {
			tb.Errorf("stopping envtest: %v", err)
		}
	})
	return e
}
