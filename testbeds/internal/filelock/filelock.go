// Package filelock is an exclusive, advisory lock on a file (flock(2)) shared
// by every process on the machine: testbed steps that must not run twice at
// once (building into one cache, picking ports and starting a control plane)
// take it. The kernel drops the lock when its holder exits, so a crashed
// holder never leaves it stuck.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// pollInterval is how often a waiter retries: flock(2) cannot wait on a
// context, so Acquire polls a non-blocking lock until its context ends.
const pollInterval = 100 * time.Millisecond

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Acquire takes the lock on path (created if missing), waiting until it is
// free or ctx ends. holder is written into the file once the lock is held,
// so a waiter can say whom it waits for; waiting, if not nil, is called once
// with that text when the lock is busy.
func Acquire(ctx context.Context, path, holder string, waiting func(heldBy string)) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !told && waiting != nil {
			told = true
			data, _ := os.ReadFile(path)
			heldBy := strings.TrimSpace(string(data))
			if heldBy == "" {
				heldBy = "holder not written yet"
			}
			waiting(heldBy)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-ticker.C:
		}
	}
	// Only diagnostics: a failed write does not make the lock less held.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(holder+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock. It returns nothing: closing the file drops the
// lock even if the explicit unlock failed.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
