package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// badNames would escape or confuse the cache's folders: "../.." as a name
// made Down remove the cache's parent (the checkout).
var badNames = []string{"../..", "..", "/abs", "a/b", "Upper", "a_b", "-a", "a.b", strings.Repeat("a", 64)}

// TestBadNamesTouchNothing proves New refuses every bad name before anything
// on disk is touched, and that a Testbed not made by New refuses Up, Down
// and Restart instead of resolving its folders against the working
// directory. Sentinels where the old code's Down removed folders survive.
func TestBadNamesTouchNothing(t *testing.T) {
	root := t.TempDir()
	cache := filepath.Join(root, "checkout", ".cache")
	sentinels := []string{
		filepath.Join(root, "checkout", "go.mod"),
		filepath.Join(cache, "bin", "keep"),
		filepath.Join(root, "keep"),
	}
	for _, s := range sentinels {
		writeSentinel(t, s)
	}
	for _, name := range badNames {
		tb, err := New(Options{Name: name, CacheDir: cache, CRDDir: root})
		if !errors.Is(err, ErrInvalidName) {
			t.Errorf("New(Name: %q) = %v, want ErrInvalidName", name, err)
		}
		if tb != nil {
			// The old code returned a testbed; its Down removed the checkout.
			_ = tb.Down(t.Context())
		}
	}
	assertSentinels(t, sentinels)

	// An empty name in Options is the default.
	tb, err := New(Options{CacheDir: cache, CRDDir: root})
	if err != nil || tb.Name() != DefaultName {
		t.Fatalf("New with no name: %v, name %q; want %q", err, tb.Name(), DefaultName)
	}

	// A zero Testbed has no name and a relative cache: refused, and the
	// working directory's folders stay.
	t.Chdir(root)
	cwdSentinels := []string{
		filepath.Join(root, "testbeds", "keep"),
		filepath.Join(root, "kwok", "clusters", "keep"),
	}
	for _, s := range cwdSentinels {
		writeSentinel(t, s)
	}
	var zero Testbed
	if err := zero.Down(t.Context()); err == nil {
		t.Error("Down on a zero Testbed succeeded")
	}
	if err := zero.Up(t.Context()); err == nil {
		t.Error("Up on a zero Testbed succeeded")
	}
	if err := zero.Restart(t.Context(), "kube-apiserver"); err == nil {
		t.Error("Restart on a zero Testbed succeeded")
	}
	assertSentinels(t, append(sentinels, cwdSentinels...))
	if entries, err := os.ReadDir(cache); err != nil || len(entries) != 1 {
		t.Errorf("the cache holds %v (%v), want only bin/: nothing may be created for a refused name", entries, err)
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"gpulab", "gpulab-test", "a", "x1", strings.Repeat("a", 63)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range append(badNames, "") {
		if err := ValidateName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func writeSentinel(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func assertSentinels(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("sentinel %s is gone: %v", p, err)
		}
	}
}
