package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRefusesBadNames proves a bad --name or $TESTBED_NAME stops every
// command before anything on disk is touched: `down --name=../..` removed
// the cache's parent (the checkout). An empty name given explicitly is
// refused too; only an absent one means the default.
func TestRefusesBadNames(t *testing.T) {
	root := t.TempDir()
	cache := filepath.Join(root, "checkout", ".cache")
	sentinel := filepath.Join(root, "checkout", "go.mod")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sentinel, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  *string
		args []string
	}{
		{args: []string{"down", "--name=../.."}},
		{args: []string{"down", "--name", "/abs"}},
		{args: []string{"down", "--name=a/b"}},
		{args: []string{"down", "--name="}},
		{args: []string{"status", "--name="}},
		{args: []string{"build", "--name=.."}},
		{env: new("../.."), args: []string{"down"}},
		{env: new(""), args: []string{"down"}},
		// The flag wins over the environment, and is checked.
		{env: new("gpulab"), args: []string{"down", "--name=../.."}},
	} {
		if tc.env != nil {
			t.Setenv("TESTBED_NAME", *tc.env)
		} else {
			t.Setenv("TESTBED_NAME", "")
			os.Unsetenv("TESTBED_NAME")
		}
		args := append(slices.Clone(tc.args), "--cache-dir="+cache)
		err := run(t.Context(), args)
		if err == nil || !strings.Contains(err.Error(), "invalid testbed name") {
			t.Errorf("gpulab-testbed %v (TESTBED_NAME=%v): %v, want an invalid testbed name error", args, tc.env, err)
		}
		if _, err := os.Stat(sentinel); err != nil {
			t.Fatalf("after gpulab-testbed %v the checkout is gone: %v", args, err)
		}
	}
	entries, err := os.ReadDir(cache)
	if err != nil || len(entries) != 0 {
		t.Errorf("the cache holds %v (%v), want nothing: refused commands must not create anything", entries, err)
	}

	// A good name gets past the check (the testbed is simply not up).
	os.Unsetenv("TESTBED_NAME")
	err = run(t.Context(), []string{"status", "--name=gpulab-cli-test", "--cache-dir=" + cache})
	if err == nil || !strings.Contains(err.Error(), "is not up") {
		t.Errorf("status of a testbed that is not up: %v, want a not-up error", err)
	}
}

// TestHelpIsNotAnError: -h (alone or after a command) and `help` print the
// usage and are not failures; no command and an unknown one are.
func TestHelpIsNotAnError(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"up", "-h"}} {
		if err := run(t.Context(), args); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: %v, want the help", args, err)
		}
	}
	for _, args := range [][]string{nil, {"nope"}} {
		if err := run(t.Context(), args); err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: %v, want an error", args, err)
		}
	}
}

// TestRefusesUnknownVersions: a Volcano or KubeRay version the testbed
// cannot build stops every command, local and kind, before the cache is
// touched, and says which versions it builds.
func TestRefusesUnknownVersions(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	os.Unsetenv("TESTBED_NAME")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"build", "--volcano-version=v1.15.1"}, "QueueAllocationGateKey"},
		{[]string{"up", "--volcano-version=1.14"}, "v1.10.0, v1.14.1"},
		{[]string{"up", "--kuberay", "--kuberay-version=v1.7.0"}, "v1.5.0, v1.6.2"},
		{[]string{"kind-build", "--volcano-version=v2"}, "v1.10.0, v1.14.1"},
		{[]string{"kind-up", "--volcano-version=v1.15.1"}, "QueueAllocationGateKey"},
	} {
		err := run(t.Context(), append(slices.Clone(tc.args), "--cache-dir="+cache))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpulab-testbed %v: %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cache was touched (%v)", err)
	}
}

// TestRefusesUnknownAutoscalers: --autoscaler takes none or karpenter only
// (cluster-autoscaler cannot be built from the module proxy), and a GPU
// limit must be positive; both are refused before the cache is touched.
func TestRefusesUnknownAutoscalers(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	os.Unsetenv("TESTBED_NAME")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"up", "--autoscaler=cluster-autoscaler"}, "none, karpenter"},
		{[]string{"build", "--autoscaler="}, "none, karpenter"},
		{[]string{"up", "--autoscaler=karpenter", "--autoscaler-max-gpus=0"}, "--autoscaler-max-gpus must be positive"},
	} {
		err := run(t.Context(), append(slices.Clone(tc.args), "--cache-dir="+cache))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpulab-testbed %v: %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cache was touched (%v)", err)
	}
}
