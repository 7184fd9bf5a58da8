package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/internal/scheme"
	"github.com/gpulab/gpulab/testbeds/binaries"
)

// APIServer is etcd and a kube-apiserver started with extra flags (e.g.
// local.NativeGangAPIServerArgs), with gpulab's CRDs and not Volcano's.
// testbeds/envtest starts the same binaries with envtest's flags only.
type APIServer struct {
	Config *rest.Config
	Client client.Client
	env    *crenvtest.Environment
	bins   *binaries.Set
}

// StartAPIServer starts an APIServer for one test (skipped under -short)
// and stops it at cleanup. args are kube-apiserver flags, "--name=value".
func StartAPIServer(tb testing.TB, args ...string) *APIServer {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs a real kube-apiserver; skipped with -short")
	}
	bins, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		cache, err := binaries.DefaultCacheDir()
		if err != nil {
			tb.Fatal(err)
		}
		if assets, err = bins.EnvtestAssets(cache); err != nil {
			tb.Fatal(err)
		}
	}
	root, err := repo.Root()
	if err != nil {
		tb.Fatal(err)
	}
	env := &crenvtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "operator", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme.Scheme,
		CRDInstallOptions:     crenvtest.CRDInstallOptions{Scheme: scheme.Scheme},
	}
	flags := env.ControlPlane.GetAPIServer().Configure()
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags.Set(name, value)
	}
	cfg, err := env.Start()
	if err != nil {
		tb.Fatal(errors.Join(fmt.Errorf("starting kube-apiserver %v: %w", args, err), env.Stop()))
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Errorf("stopping envtest: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	return &APIServer{Config: cfg, Client: c, env: env, bins: bins}
}

// StartScheduler runs the testbed's kube-scheduler against the API server,
// as an administrator, with args added to its flags, until the test ends
// or stop is called. Its log is printed if the test fails.
func (a *APIServer) StartScheduler(t *testing.T, args ...string) (stop func()) {
	t.Helper()
	admin, err := a.env.AddUser(crenvtest.User{Name: "kube-scheduler-test", Groups: []string{"system:masters"}}, a.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, a.bins.KubeScheduler, append([]string{
		"--kubeconfig=" + path, "--authentication-kubeconfig=" + path, "--authorization-kubeconfig=" + path,
		"--leader-elect=false", "--secure-port=0", "--v=2",
	}, args...)...)
	logFile, err := os.Create(filepath.Join(dir, "kube-scheduler.log"))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting kube-scheduler: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		<-done
		_ = logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("kube-scheduler's log:\n%s", tail(string(log), 8000))
		}
	}
	t.Cleanup(stop)
	return stop
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
