package docs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSuiteExit: hack/suite-exit.sh, which the README and nightly.md tell
// users to run, exits with the code the target wrote to SUITE_EXIT_FILE
// (make itself would turn it into 2), and with 1 when make fails before
// the suite runs. A stub stands in for make.
func TestSuiteExit(t *testing.T) {
	script, err := filepath.Abs(filepath.Join(root, "hack/suite-exit.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stub string
		want       int
		stderr     string
	}{
		{"the suite's code", `for a in "$@"; do case $a in SUITE_EXIT_FILE=*) echo 3 >"${a#*=}";; esac; done`, 3, ""},
		{"make fails before the suite", `echo "build error" >&2; exit 2`, 1, "exited 2 before the suite ran"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stub := filepath.Join(t.TempDir(), "make")
			if err := os.WriteFile(stub, []byte("#!/usr/bin/env bash\n"+tc.stub+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(script, "conformance")
			cmd.Env = append(os.Environ(), "MAKE="+stub)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.want || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, want %d; stderr %q, want it to contain %q", code, tc.want, stderr.String(), tc.stderr)
			}
		})
	}
}
