package version_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/internal/testbin"
)

// shipped are the binaries `make build` writes and users run: each must
// answer --version with its name and version, whatever its other flags.
var shipped = []struct{ name, pkg string }{
	{"gpulab-operator", "./operator/cmd/gpulab-operator"},
	{"gpulab-agent", "./node-agent/cmd/gpulab-agent"},
	{"gpulab-testbed", "./testbeds/cmd/gpulab-testbed"},
	{"bench-scale", "./conformance/cmd/bench-scale"},
	{"compare-operators", "./conformance/cmd/compare-operators"},
	{"compare-schedulers", "./conformance/cmd/compare-schedulers"},
	{"compare-autoscaling", "./conformance/cmd/compare-autoscaling"},
}

// TestEveryBinaryAnswersVersion builds each shipped binary with a stamped
// version and runs it with --version. (gpulab-conformance is a test binary;
// conformance/cli's version test covers it.)
func TestEveryBinaryAnswersVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary; skipped with -short")
	}
	const stamped = "v0.0.0-versiontest"
	for _, b := range shipped {
		t.Run(b.name, func(t *testing.T) {
			out, err := testbin.Build(t.Context(), filepath.Join("version", b.name), b.pkg,
				"build", "-ldflags", "-X github.com/gpulab/gpulab/internal/version.Version="+stamped)
			if err != nil {
				t.Fatal(err)
			}
			got, err := exec.Command(out, "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v\n%s", b.name, err, got)
			}
			if line := strings.TrimSpace(string(got)); !strings.HasPrefix(line, b.name+" "+stamped) || strings.Contains(line, "\n") {
				t.Errorf("%s --version printed %q, want one line starting %q", b.name, line, b.name+" "+stamped)
			}
		})
	}
}
