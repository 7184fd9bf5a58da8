package binaries

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperEnv selects the helper mode of this test binary: the cache folder
// its ensureAll builds into.
const helperEnv = "GPULAB_BINARIES_TEST_SHARED_CACHE"

// fakeBinary is what the fake component's build writes, in two halves.
var fakeBinary = bytes.Repeat([]byte("gpulab fake binary\n"), 1<<14)

// fakeComponent records each build in <cache>/builds, then writes its
// binary once it sees the other process blocked on the build lock (its
// "waiting" line in <cache>/waiting) or building too: without the lock both
// build, with it one does.
func fakeComponent(cache string) component {
	return component{
		name: "fake", version: "v1", binaries: []string{"fake"},
		build: func(ctx context.Context, b *builder, out string) error {
			if err := appendLine(filepath.Join(cache, "builds"), strconv.Itoa(os.Getpid())); err != nil {
				return err
			}
			bin := filepath.Join(out, "fake")
			half := len(fakeBinary) / 2
			if err := os.WriteFile(bin, fakeBinary[:half], 0o755); err != nil {
				return err
			}
			// The other process either waits on the lock or builds; a
			// deadline (not an error) so a stuck peer fails the counts.
			deadline := time.Now().Add(20 * time.Second)
			for !othersSeen(cache) && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
			f, err := os.OpenFile(bin, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			if _, err := f.Write(fakeBinary[half:]); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
	}
}

// othersSeen says whether a process other than this one has logged waiting
// for the build lock or started a build.
func othersSeen(cache string) bool {
	me := strconv.Itoa(os.Getpid())
	for _, name := range []string{"waiting", "builds"} {
		data, _ := os.ReadFile(filepath.Join(cache, name))
		for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
			if line != "" && line != me {
				return true
			}
		}
	}
	return false
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// waitingLog turns the builder's "waiting for another build" line into this
// process's PID in <cache>/waiting.
type waitingLog struct{ cache string }

func (w waitingLog) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("waiting for another build")) {
		if err := appendLine(filepath.Join(w.cache, "waiting"), strconv.Itoa(os.Getpid())); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// TestEnsureAllHelperProcess is the other process of
// TestTwoProcessesShareOneCache; it does nothing in a normal run.
func TestEnsureAllHelperProcess(t *testing.T) {
	cache := os.Getenv(helperEnv)
	if cache == "" {
		t.Skip("helper process of TestTwoProcessesShareOneCache")
	}
	// Both processes call ensureAll together: each waits for the other's
	// ready file.
	if err := appendLine(filepath.Join(cache, "ready"), strconv.Itoa(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(cache, "ready"))
		if strings.Count(string(data), "\n") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other process never got ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := &builder{opts: Options{CacheDir: cache, Log: waitingLog{cache}}}
	c := fakeComponent(cache)
	if err := b.ensureAll(t.Context(), []component{c}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(b.path(c, "fake"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fakeBinary) {
		t.Fatalf("binary after ensureAll: %d bytes, want %d complete", len(got), len(fakeBinary))
	}
}

// TestTwoProcessesShareOneCache: two processes (two clones' builds) that
// ensure one component in one cache at once build it once, under the
// cache's build lock, and both get the complete binary; no .partial is left.
func TestTwoProcessesShareOneCache(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("running as the helper")
	}
	cache := t.TempDir()
	procs := make([]*exec.Cmd, 2)
	outs := make([]*bytes.Buffer, 2)
	for i := range procs {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestEnsureAllHelperProcess$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), helperEnv+"="+cache)
		outs[i] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
	}
	var errs []error
	for i, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("process %d: %w\n%s", i, err, outs[i]))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}

	builds, _ := os.ReadFile(filepath.Join(cache, "builds"))
	if n := strings.Count(string(builds), "\n"); n != 1 {
		t.Errorf("the component was built %d times (by pids %q), want once", n, strings.Fields(string(builds)))
	}
	got, err := os.ReadFile(filepath.Join(cache, "bin", "fake-v1", "fake"))
	if err != nil || !bytes.Equal(got, fakeBinary) {
		t.Errorf("cached binary: %d bytes, %v; want %d complete", len(got), err, len(fakeBinary))
	}
	partial, _ := filepath.Glob(filepath.Join(cache, "bin", "*.partial"))
	if len(partial) > 0 {
		t.Errorf("left behind: %v", partial)
	}
}
