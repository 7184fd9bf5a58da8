package envtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpulab/gpulab/internal/poll"
)

// A CRD the API server refuses: a CEL rule that does not compile.
const badCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: broken.example.com
spec:
  group: example.com
  names: {kind: Broken, plural: broken, singular: broken, listKind: BrokenList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-validations:
        - rule: "self.spec.("
`

// TestFailedStartLeavesNoProcess: when Start fails after the control plane
// came up (here: a CRD the API server rejects), etcd and kube-apiserver are
// stopped, not left running for the rest of the machine's life.
func TestFailedStartLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte(badCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := Start(context.Background(), Options{CRDDirs: []string{dir}})
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start accepted a CRD the API server must reject")
	}
	t.Logf("Start: %v", err)
	if err := poll.Until(t.Context(), 30*time.Second, func() (bool, string) {
		left := children("etcd", "kube-apiserver")
		return len(left) == 0, fmt.Sprintf("still running: %v", left)
	}); err != nil {
		t.Fatalf("after a failed Start: %v", err)
	}
}

// children lists this process's live children whose command is one of names.
func children(names ...string) []string {
	me := strconv.Itoa(os.Getpid())
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(stat)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || fields[1] != me || fields[0] == "Z" {
			continue
		}
		comm := s[strings.IndexByte(s, '(')+1 : end]
		for _, n := range names {
			if strings.HasPrefix(n, comm) || comm == n {
				out = append(out, e.Name()+" "+comm)
			}
		}
	}
	return out
}

// TestCRDsHaveTimeToBeServed: Start waits for its CRDs to be served as
// long as a loaded machine needs (crdsServedTimeout), not
// controller-runtime's 10 s default, which ran out once in make test.
func TestCRDsHaveTimeToBeServed(t *testing.T) {
	env := newEnvironment("/assets", []string{"/crds"})
	if got := env.CRDInstallOptions.MaxTime; got < time.Minute {
		t.Errorf("Start waits %s (0: controller-runtime's 10 s) for its CRDs to be served; 10 s ran out under load", got)
	}
	if !env.ErrorIfCRDPathMissing || env.CRDInstallOptions.Scheme == nil || env.BinaryAssetsDirectory != "/assets" {
		t.Errorf("environment %+v: want the assets, a scheme and missing CRD paths refused", env)
	}
}
