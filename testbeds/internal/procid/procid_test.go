package procid

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
