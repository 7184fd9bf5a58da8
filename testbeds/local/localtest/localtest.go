// Package localtest brings the local testbed up for a Go test. It is a
// package of its own so that `testing` stays out of the gpulab-testbed
// binary, which links package local.
package localtest

import (
	"context"
	"testing"

	"github.com/gpulab/gpulab/testbeds/local"
)

// Start brings a testbed up for one test (skipped under -short) and tears it
// down when the test ends, failed or not.
func Start(t testing.TB, opts local.Options) *local.Testbed {
	t.Helper()
	if testing.Short() {
		t.Skip("brings up the local testbed; skipped with -short")
	}
	tb, err := local.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Down(context.Background()); err != nil {
			t.Errorf("testbed down: %v", err)
		}
	})
	if err := tb.Up(t.Context()); err != nil {
		t.Fatalf("testbed up: %v", err)
	}
	return tb
}
