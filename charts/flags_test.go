package charts

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// buildBinary builds one of gpulab's commands from this tree.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the operator and agent binaries; skipped with -short")
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./"+pkg)
	cmd.Dir = repo()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func run(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// TestOperatorAcceptsRenderedArgs: the operator's own flag parser takes
// every argument the chart renders (--version makes it exit after parsing
// instead of connecting), so the chart never passes a flag that does not
// exist or a value of the wrong type.
func TestOperatorAcceptsRenderedArgs(t *testing.T) {
	bin := buildBinary(t, "operator/cmd/gpulab-operator")
	ch := loadChart(t)
	for name, vals := range map[string]map[string]any{"defaults": nil, "everything on": values(t, everythingOn)} {
		var dep appsv1.Deployment
		into(t, render(t, ch, vals).find(t, "Deployment", "gpulab-operator"), &dep)
		args := dep.Spec.Template.Spec.Containers[0].Args
		if code, out := run(t, bin, append(args, "--version")...); code != 0 || !strings.Contains(out, "gpulab-operator") {
			t.Errorf("%s: gpulab-operator %v --version exited %d:\n%s", name, args, code, out)
		}
	}
	if code, _ := run(t, bin, "--no-such-flag=1", "--version"); code == 0 {
		t.Error("the operator accepted an unknown flag: this test cannot tell")
	}
}

// TestAgentAcceptsRenderedArgs: the agent parses every argument the chart
// renders (-h makes it stop after parsing), and every NVML mode the schema
// allows is one the agent knows (its inventory command opens the mocks).
func TestAgentAcceptsRenderedArgs(t *testing.T) {
	bin := buildBinary(t, "node-agent/cmd/gpulab-agent")
	ch := loadChart(t)
	for name, vals := range map[string]map[string]any{"defaults": nil, "everything on": values(t, everythingOn), "dra": values(t, draOn)} {
		var ds appsv1.DaemonSet
		into(t, render(t, ch, vals).find(t, "DaemonSet", "gpulab-agent"), &ds)
		args := ds.Spec.Template.Spec.Containers[0].Args
		if code, out := run(t, bin, append(args, "-h")...); code != 0 {
			t.Errorf("%s: gpulab-agent %v -h exited %d:\n%s", name, args, code, out)
		}
	}
	if code, _ := run(t, bin, "--no-such-flag=1", "-h"); code == 0 {
		t.Error("the agent accepted an unknown flag: this test cannot tell")
	}
	for _, mode := range schemaNVMLModes(t) {
		if !strings.HasPrefix(mode, "mock:") {
			continue
		}
		if code, out := run(t, bin, "inventory", "--nvml="+mode, "--node-name=chart-test", "-o", "json"); code != 0 || !strings.Contains(out, "chart-test") {
			t.Errorf("gpulab-agent inventory --nvml=%s exited %d:\n%s", mode, code, out)
		}
	}
}
