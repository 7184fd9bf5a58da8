package procid

import (
	"os/exec"
	"testing"
)

// Start returns once the child's exec has closed its close-on-exec files,
// which the kernel does before it sets up the new program's arguments: for
// a moment /proc/PID/cmdline is empty. The program read right after a
// start (as recordIdentity and Verify do) must still be the program.
func TestProgramRightAfterStart(t *testing.T) {
	for range 300 {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		name, err := Program(cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err != nil || name != "sleep" {
			t.Fatalf("Program right after start = %q, %v; want sleep", name, err)
		}
	}
}
