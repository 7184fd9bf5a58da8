package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpulab/gpulab/testbeds/internal/procid"
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

// startComponent runs a copy of sleep at bin (so its argv[0] and
// /proc/<pid>/exe name bin, as a component kwokctl starts) and writes its
// pid file.
func startComponent(t *testing.T, tb *Testbed, component, bin string) *exec.Cmd {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("needs sleep")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.MkdirAll(filepath.Dir(tb.pidFile(component)), 0o755); err != nil {
		t.Fatal(err)
	}
	writePID(t, tb.pidFile(component), cmd.Process.Pid, time.Now())
	return cmd
}

// configureEtcd writes the testbed's kwokctl configuration, naming bin as
// its etcd.
func configureEtcd(t *testing.T, tb *Testbed, bin string) {
	t.Helper()
	if err := os.MkdirAll(tb.stateDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	config := "---\napiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\noptions:\n  etcdBinary: " + bin + "\n"
	if err := os.WriteFile(filepath.Join(tb.stateDir(), "kwokctl.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newPIDTestbed(t *testing.T, name string) *Testbed {
	t.Helper()
	tb, err := New(Options{Name: name, CacheDir: t.TempDir(), Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestDownLeavesAnotherBinaryAlone: etcd's pid file names a live process,
// named etcd and started after the file, but not of the binary the testbed
// configured for etcd. Down never signals it and removes the stale pid file.
func TestDownLeavesAnotherBinaryAlone(t *testing.T) {
	tb := newPIDTestbed(t, "pid-other-binary")
	dir := t.TempDir()
	configureEtcd(t, tb, filepath.Join(dir, "bin", "etcd"))
	cmd := startComponent(t, tb, "etcd", filepath.Join(dir, "elsewhere", "etcd"))

	_ = tb.Down(t.Context()) // nothing to delete; what matters is what it signals
	if !processAlive(cmd.Process.Pid) {
		t.Fatal("Down signalled a process of another binary")
	}
	if _, err := os.Stat(tb.pidFile("etcd")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale pid file kept: %v", err)
	}
}

// TestDownLeavesAnotherRecordedProcessAlone: the identity recorded for the
// pid file's PID has another start time, so the live process got the number
// later. It is never signalled, though its binary is the configured one.
func TestDownLeavesAnotherRecordedProcessAlone(t *testing.T) {
	tb := newPIDTestbed(t, "pid-recorded")
	bin := filepath.Join(t.TempDir(), "etcd")
	configureEtcd(t, tb, bin)
	cmd := startComponent(t, tb, "etcd", bin)
	id, err := procid.Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	id.StartTicks--
	record := func() {
		writePID(t, tb.pidFile("etcd"), cmd.Process.Pid, time.Now())
		if err := procid.Save(procid.IDFile(tb.pidFile("etcd")), id); err != nil {
			t.Fatal(err)
		}
	}
	record()
	if pid := tb.runningPID("etcd"); pid != 0 {
		t.Fatalf("runningPID = %d for a process whose start time is not the recorded one", pid)
	}
	record()
	_ = tb.Down(t.Context())
	if !processAlive(cmd.Process.Pid) {
		t.Fatal("Down signalled a process whose start time is not the recorded one")
	}
	if _, err := os.Stat(tb.pidFile("etcd")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale pid file kept: %v", err)
	}
}

// TestDownStopsItsOwnProcess: the process the testbed started (its
// configured binary, its identity recorded) is recognised and stopped, at
// once when kwokctl cannot stop it (here kwokctl is not even built).
func TestDownStopsItsOwnProcess(t *testing.T) {
	tb := newPIDTestbed(t, "pid-own")
	bin := filepath.Join(t.TempDir(), "etcd")
	configureEtcd(t, tb, bin)
	cmd := startComponent(t, tb, "etcd", bin)
	tb.recordIdentities()
	if _, err := procid.Load(procid.IDFile(tb.pidFile("etcd"))); err != nil {
		t.Fatalf("no identity recorded: %v", err)
	}
	if pid := tb.runningPID("etcd"); pid != cmd.Process.Pid {
		t.Fatalf("runningPID = %d, want our process %d", pid, cmd.Process.Pid)
	}

	start := time.Now()
	_ = tb.Down(t.Context())
	if processAlive(cmd.Process.Pid) {
		t.Fatal("Down left the testbed's own process running")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Down took %s to stop a process that exits on SIGTERM", took)
	}
}

// TestWaitExitedKillsOnlyItsOwn: a process whose PID went to another one
// while Down waited (here: another start time) is not killed at the
// deadline.
func TestWaitExitedKillsOnlyItsOwn(t *testing.T) {
	tb := newPIDTestbed(t, "pid-wait")
	cmd := startComponent(t, tb, "etcd", filepath.Join(t.TempDir(), "etcd"))
	id, err := procid.Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	other := id
	other.StartTicks--
	if err := waitExited(t.Context(), []procid.Identity{other}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !processAlive(cmd.Process.Pid) {
		t.Fatal("waitExited killed a process that is not the one it waited for")
	}
	if err := waitExited(t.Context(), []procid.Identity{id}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := poll(t.Context(), 10*time.Second, func(context.Context) (bool, error) { return !processAlive(cmd.Process.Pid), nil }); err != nil {
		t.Fatalf("waitExited left its own process running at the deadline: %v", err)
	}
}
