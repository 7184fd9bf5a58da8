package cli

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpulab/gpulab/api/v1alpha1"
)

// TestLeaseNamespaceDefaultsToThePodsNamespace: without --lease-namespace,
// the Lease goes to $POD_NAMESPACE, else to the service account's
// namespace, else (outside a pod) to gpulab-system; the flag wins.
func TestLeaseNamespaceDefaultsToThePodsNamespace(t *testing.T) {
	saFile := filepath.Join(t.TempDir(), "namespace")
	defer func(f string) { serviceAccountNamespaceFile = f }(serviceAccountNamespaceFile)
	serviceAccountNamespaceFile = saFile
	parse := func(args ...string) string {
		t.Helper()
		var f runFlags
		fs := flag.NewFlagSet("gpulab-agent", flag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(append([]string{"--node-name=n"}, args...)); err != nil {
			t.Fatal(err)
		}
		if err := f.validate(fs); err != nil {
			t.Fatal(err)
		}
		return f.leaseNamespace
	}
	t.Setenv("POD_NAMESPACE", "")
	if got := parse(); got != v1alpha1.DefaultHeartbeatLeaseNamespace {
		t.Errorf("outside a pod: %q, want %s", got, v1alpha1.DefaultHeartbeatLeaseNamespace)
	}
	if err := os.WriteFile(saFile, []byte("from-service-account\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := parse(); got != "from-service-account" {
		t.Errorf("with the service account's namespace file: %q", got)
	}
	t.Setenv("POD_NAMESPACE", "from-downward-api")
	if got := parse(); got != "from-downward-api" {
		t.Errorf("with $POD_NAMESPACE: %q", got)
	}
	if got := parse("--lease-namespace=explicit"); got != "explicit" {
		t.Errorf("with --lease-namespace: %q", got)
	}
}
