package profile

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/gpulab/gpulab/internal/testbin"
)

// TestConstantsAreTheOperatorsDefaults: the suite and the benchmarks name
// ReconcileConcurrency, OperatorQPS and OperatorBurst as what
// gpulab-operator ships with, and give them to KubeRay beside it, so they
// must be the binary's own flag defaults.
func TestConstantsAreTheOperatorsDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpulab-operator; skipped with -short")
	}
	bin, err := testbin.Build(t.Context(), filepath.Join("profile", "gpulab-operator"), "./operator/cmd/gpulab-operator", "build")
	if err != nil {
		t.Fatal(err)
	}
	// -h exits 0 with the flag package's usage on stderr.
	usage, err := exec.Command(bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -h: %v\n%s", bin, err, usage)
	}
	for flag, want := range map[string]float64{
		"reconcile-concurrency": ReconcileConcurrency,
		"kube-api-qps":          OperatorQPS,
		"kube-api-burst":        OperatorBurst,
	} {
		m := regexp.MustCompile(`(?m)^\s+-` + flag + ` \w+\n.*\(default ([0-9.]+)\)`).FindSubmatch(usage)
		if m == nil {
			t.Errorf("-%s has no default in the usage:\n%s", flag, usage)
			continue
		}
		if got, _ := strconv.ParseFloat(string(m[1]), 64); got != want {
			t.Errorf("gpulab-operator's -%s defaults to %s; the suite says %g", flag, m[1], want)
		}
	}
}
