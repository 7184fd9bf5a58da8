package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
