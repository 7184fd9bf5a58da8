package procid

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func startSleep(t *testing.T) int {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

func writePIDFile(t *testing.T, pid int, written time.Time) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.pid")
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, written, written); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerifyOurs(t *testing.T) {
	pid := startSleep(t)
	path := writePIDFile(t, pid, time.Now())
	if got := Read(path); got != pid {
		t.Fatalf("Read = %d, want %d", got, pid)
	}
	if err := Verify(path, pid, "sleep"); err != nil {
		t.Fatalf("our own process: %v", err)
	}
}

// A pid file written before the process now holding its PID started (the
// kernel reused the number) is not ours, whatever the program.
func TestVerifyReusedPID(t *testing.T) {
	pid := startSleep(t)
	path := writePIDFile(t, pid, time.Now().Add(-time.Hour))
	if err := Verify(path, pid, "sleep"); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("a process started an hour after its pid file: err = %v, want ErrNotOurs", err)
	}
}

func TestVerifyOtherProgram(t *testing.T) {
	pid := startSleep(t)
	path := writePIDFile(t, pid, time.Now())
	if err := Verify(path, pid, "etcd"); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("sleep named as etcd: err = %v, want ErrNotOurs", err)
	}
}

func TestStartTimeIsRecent(t *testing.T) {
	before := time.Now().Add(-2 * time.Second)
	pid := startSleep(t)
	started, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if started.Before(before) || started.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("start time %s, want about now", started)
	}
}

// startCopy runs a copy of sleep named name (so its argv[0] and
// /proc/<pid>/exe say name), as kwokctl runs a component.
func startCopy(t *testing.T, dir, name string) *exec.Cmd {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("needs sleep")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func TestOfRecordsStartTimeAndExecutable(t *testing.T) {
	dir := t.TempDir()
	cmd := startCopy(t, dir, "etcd")
	id, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if id.PID != cmd.Process.Pid || id.StartTicks == 0 || id.BootID == "" {
		t.Fatalf("identity %+v", id)
	}
	if want, _ := filepath.EvalSymlinks(filepath.Join(dir, "etcd")); id.Exe != want {
		t.Fatalf("Exe = %q, want %q", id.Exe, want)
	}
	path := filepath.Join(dir, "etcd.pid.id")
	if err := Save(path, id); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(path); err != nil || got != id {
		t.Fatalf("Load = %+v, %v; want %+v", got, err, id)
	}
	if err := id.Check(); err != nil {
		t.Fatalf("Check of the live process: %v", err)
	}
}

// A recorded identity whose start time is not the live process's is
// another process that got the PID: Signal refuses, and it lives on.
func TestSignalRefusesAnotherProcess(t *testing.T) {
	cmd := startCopy(t, t.TempDir(), "etcd")
	id, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	other := id
	other.StartTicks++
	if err := Signal(other, syscall.SIGTERM); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Signal with another start time: %v, want ErrNotOurs", err)
	}
	other = id
	other.Exe = "/usr/bin/kube-apiserver"
	if err := Signal(other, syscall.SIGTERM); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("Signal with another executable: %v, want ErrNotOurs", err)
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Fatalf("the other process was signalled: %v", err)
	}
	// Our own is signalled, and once gone is not running.
	if err := Signal(id, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := Signal(id, syscall.SIGTERM); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Signal after exit: %v, want ErrNotRunning", err)
	}
}

// Owned trusts a record made for the pid file's PID over the file's time,
// and without one checks the executable the caller configured.
func TestOwned(t *testing.T) {
	dir := t.TempDir()
	cmd := startCopy(t, dir, "etcd")
	pidFile := writePIDFile(t, cmd.Process.Pid, time.Now())
	bin := filepath.Join(dir, "etcd")
	if _, err := Owned(pidFile, Expect{Program: "etcd", Exe: bin}); err != nil {
		t.Fatalf("our own process, no record: %v", err)
	}
	if _, err := Owned(pidFile, Expect{Program: "etcd", Exe: "/elsewhere/etcd"}); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("another etcd binary: %v, want ErrNotOurs", err)
	}
	// The pid file is much newer than the process: not the process it was
	// written for.
	if err := os.Chtimes(pidFile, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := Owned(pidFile, Expect{Program: "etcd", Exe: bin}); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("process an hour older than its pid file: %v, want ErrNotOurs", err)
	}
	// A record for this PID decides, whatever the file's time.
	id, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(IDFile(pidFile), id); err != nil {
		t.Fatal(err)
	}
	if got, err := Owned(pidFile, Expect{Program: "etcd", Exe: bin}); err != nil || got != id {
		t.Fatalf("recorded process: %+v, %v", got, err)
	}
	id.StartTicks++
	if err := Save(IDFile(pidFile), id); err != nil {
		t.Fatal(err)
	}
	if _, err := Owned(pidFile, Expect{Program: "etcd", Exe: bin}); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("record with another start time: %v, want ErrNotOurs", err)
	}
}

// A process that has exited but is not reaped yet (a zombie has no command
// line or executable) is not running; it is not another process.
func TestOwnedZombieIsNotRunning(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s, err := state(pid); err == nil && s == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became a zombie", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	pidFile := writePIDFile(t, pid, time.Now())
	if _, err := Owned(pidFile, Expect{Program: "true"}); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Owned of an exited, unreaped process: %v, want ErrNotRunning", err)
	}
}
