package dockerhost

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpulab/gpulab/testbeds/internal/procid"
)

// startFakeDockerd runs a copy of sleep named dockerd and writes its PID
// where dockerd writes its own; it returns the process and its identity.
func startFakeDockerd(t *testing.T, state string) (*exec.Cmd, procid.Identity) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("needs sleep")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "dockerd")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(pidPath(state), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := procid.Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, id
}

// A dockerd pid file whose recorded identity has another start time names
// a process that got the PID later, though it is called dockerd: Stop and
// UseStarted leave it alone and remove the stale pid file.
func TestStopLeavesAnotherRecordedProcessAlone(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	state := t.TempDir()
	cmd, id := startFakeDockerd(t, state)
	id.StartTicks--
	if err := procid.Save(procid.IDFile(pidPath(state)), id); err != nil {
		t.Fatal(err)
	}
	pid, err := Stop(t.Context(), state, time.Second)
	if err != nil || pid != 0 {
		t.Fatalf("Stop = %d, %v; want 0, nil", pid, err)
	}
	if !alive(cmd.Process.Pid) {
		t.Fatal("Stop signalled a process whose start time is not the recorded dockerd's")
	}
	if _, err := os.Stat(pidPath(state)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale pid file kept: %v", err)
	}
}

// The dockerd Ensure started (its identity recorded) is the one UseStarted
// points DOCKER_HOST at and Stop ends.
func TestUseStartedAndStopOwnDaemon(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	state := t.TempDir()
	cmd, id := startFakeDockerd(t, state)
	if err := recordIdentity(state, id.PID); err != nil {
		t.Fatal(err)
	}
	used, err := UseStarted(state)
	if err != nil || !used {
		t.Fatalf("UseStarted = %v, %v; want true", used, err)
	}
	if got, want := os.Getenv("DOCKER_HOST"), "unix://"+filepath.Join(state, "docker.sock"); got != want {
		t.Fatalf("DOCKER_HOST = %q, want %q", got, want)
	}
	pid, err := Stop(t.Context(), state, 10*time.Second)
	if err != nil || pid != cmd.Process.Pid {
		t.Fatalf("Stop = %d, %v; want %d, nil", pid, err, cmd.Process.Pid)
	}
	if alive(cmd.Process.Pid) {
		t.Fatal("our dockerd still runs after Stop")
	}
}
