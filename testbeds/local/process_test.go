package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A program whose main thread exits while a second thread runs on until
// stdin closes, as a Go program's main thread can when it is killed.
const zombieLeaderC = `#include <pthread.h>
#include <unistd.h>
static void *hold(void *arg) { char c; (void)arg; (void)read(0, &c, 1); _exit(0); }
int main(void) { pthread_t t; pthread_create(&t, 0, hold, 0); pthread_exit(0); }
`

// TestProcessAliveWhileMainThreadIsZombie: a process whose main thread is a
// zombie but whose other threads still run (and hold its sockets) is alive.
// Down and Restart took such a process for gone, and its ports were still
// bound after down.
func TestProcessAliveWhileMainThreadIsZombie(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "leader.c"), filepath.Join(dir, "leader")
	if err := os.WriteFile(src, []byte(zombieLeaderC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), gcc, "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(t.Context(), bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	if err := poll(t.Context(), 10*time.Second, func(context.Context) (bool, error) {
		state, err := procState(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && state == "Z", nil
	}); err != nil {
		t.Fatalf("main thread of pid %d never became a zombie: %v", pid, err)
	}
	if !processAlive(pid) {
		t.Fatalf("pid %d: main thread a zombie, second thread running; processAlive says it is gone", pid)
	}
	stdin.Close()
	if err := poll(t.Context(), 10*time.Second, func(context.Context) (bool, error) { return !processAlive(pid), nil }); err != nil {
		t.Fatalf("pid %d still alive after its last thread exited: %v", pid, err)
	}
}

// TestDownLeavesOtherProcessesAlone: a pid file whose number now belongs to
// a process the testbed did not start (another program, or the same program
// started after the pid file was written) is never signalled by Down, and
// the stale pid file is removed.
func TestDownLeavesOtherProcessesAlone(t *testing.T) {
	tb, err := New(Options{Name: "pid-reuse", CacheDir: t.TempDir(), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tb.Workdir(), "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.CommandContext(t.Context(), "sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	// etcd's pid file names a sleep: another program.
	other := start()
	writePID(t, tb.pidFile("etcd"), other.Process.Pid, time.Now())
	// kube-apiserver's names a process that started after the file was
	// written: a reused number, whatever it runs.
	reused := start()
	writePID(t, tb.pidFile("kube-apiserver"), reused.Process.Pid, time.Now().Add(-time.Hour))

	for _, c := range tb.Components() {
		if c.Running {
			t.Errorf("%s (pid %d) reported running: it is not the testbed's process", c.Name, c.PID)
		}
	}
	_ = tb.Down(t.Context()) // the cluster is not there to delete; what matters is what it signals
	for _, cmd := range []*exec.Cmd{other, reused} {
		if !processAlive(cmd.Process.Pid) {
			t.Errorf("pid %d was signalled by Down", cmd.Process.Pid)
		}
	}
}

// TestRunningPIDVerifiesStartTime: Restart's view of a component ignores a
// pid file whose process started after it was written.
func TestRunningPIDVerifiesStartTime(t *testing.T) {
	tb, err := New(Options{Name: "pid-start", CacheDir: t.TempDir(), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tb.Workdir(), "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The program name matches (the component is named after it), but the
	// process is younger than the pid file.
	writePID(t, tb.pidFile("sleep"), cmd.Process.Pid, time.Now().Add(-time.Hour))
	if pid := tb.runningPID("sleep"); pid != 0 {
		t.Fatalf("runningPID = %d for a process started after its pid file was written, want 0", pid)
	}
	writePID(t, tb.pidFile("sleep"), cmd.Process.Pid, time.Now())
	if pid := tb.runningPID("sleep"); pid != cmd.Process.Pid {
		t.Fatalf("runningPID = %d for our own process, want %d", pid, cmd.Process.Pid)
	}
}

func writePID(t *testing.T, path string, pid int, written time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, written, written); err != nil {
		t.Fatal(err)
	}
}
