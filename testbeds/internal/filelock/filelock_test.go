package filelock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestAcquireExcludes proves a second Acquire waits while the lock is held,
// names the holder, gives up when its context ends, and gets the lock once it
// is released. flock(2) locks belong to an open file, so two Acquires in one
// process exclude each other as two processes do.
func TestAcquireExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "test.lock")
	first, err := Acquire(t.Context(), path, "pid 1 first", nil)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	var heldBy string
	if _, err := Acquire(ctx, path, "second", func(h string) { heldBy = h }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while held returned %v, want a deadline error", err)
	}
	if heldBy != "pid 1 first" {
		t.Errorf("waiter was told the holder is %q, want %q", heldBy, "pid 1 first")
	}

	// Released while a waiter polls: the waiter gets it.
	got := make(chan error, 1)
	go func() {
		l, err := Acquire(t.Context(), path, "third", nil)
		l.Release()
		got <- err
	}()
	first.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire after release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not get the released lock within 10s")
	}
}
