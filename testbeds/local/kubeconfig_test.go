package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// userKubeconfig is a kubeconfig of the user's with known bytes, set as
// $KUBECONFIG for the test; check fails the test if its bytes changed.
func userKubeconfig(t *testing.T) (check func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	const config = "apiVersion: v1\nkind: Config\ncurrent-context: mine\n# the user's own file\n"
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	return func() {
		t.Helper()
		if got, err := os.ReadFile(path); err != nil || string(got) != config {
			t.Errorf("the testbed changed $KUBECONFIG %s (%v):\n%s", path, err, got)
		}
	}
}

// TestKwokctlGetsItsOwnKubeconfig: every kwokctl run has KUBECONFIG set to
// the testbed's own file, and create and delete (which add and remove a
// context in it) name that file with --kubeconfig, so kwokctl never merges
// into $KUBECONFIG or ~/.kube/config.
func TestKwokctlGetsItsOwnKubeconfig(t *testing.T) {
	check := userKubeconfig(t)
	dir := t.TempDir()
	record := filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "kwokctl")
	script := "#!/bin/sh\necho \"KUBECONFIG=$KUBECONFIG $*\" >>" + record + "\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tb, err := New(Options{Name: "own-kubeconfig", CacheDir: filepath.Join(dir, "cache"), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	bins := &binaries.Set{Kwokctl: fake, Kubectl: filepath.Join(dir, "kubectl")}
	for _, args := range [][]string{
		{"create", "cluster", "--name", tb.Name()},
		{"start", "cluster", "--name", tb.Name()},
		{"delete", "cluster", "--name", tb.Name()},
	} {
		if err := tb.kwokctl(t.Context(), bins, args...); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	own := tb.kwokctlKubeconfig()
	if !strings.HasPrefix(own, tb.stateDir()+"/") {
		t.Errorf("kwokctl's kubeconfig %s is not in the testbed's state folder %s", own, tb.stateDir())
	}
	calls := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(calls) != 3 {
		t.Fatalf("kwokctl calls:\n%s", data)
	}
	for _, call := range calls {
		if !strings.HasPrefix(call, "KUBECONFIG="+own+" ") {
			t.Errorf("kwokctl ran without KUBECONFIG=%s: %s", own, call)
		}
		if sub := strings.Fields(call)[1]; (sub == "create" || sub == "delete") && !strings.Contains(call, " --kubeconfig="+own) {
			t.Errorf("kwokctl %s without --kubeconfig=%s: %s", sub, own, call)
		}
	}
	check()
}

// TestUpDownLeavesTheUsersKubeconfig brings a one-node testbed up and down
// with $KUBECONFIG set to a file of the user's, which must keep its bytes.
func TestUpDownLeavesTheUsersKubeconfig(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the local testbed; skipped with -short")
	}
	check := userKubeconfig(t)
	fleet, err := ParseFleet("dgx-a100=1")
	if err != nil {
		t.Fatal(err)
	}
	tb := startForTest(t, Options{Name: "gpulab-kubeconfig", Fleet: fleet, Log: testLog{t}})
	check()
	if err := tb.Down(context.WithoutCancel(t.Context())); err != nil {
		t.Fatalf("testbed down: %v", err)
	}
	check()
}
