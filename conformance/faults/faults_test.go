// Package faults proves the conformance suite catches a broken operator: it
// runs the real suite against operator builds with a planted fault and
// expects it to fail, naming the fault.
package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local/binaries"
)

func TestSuiteCatchesPlantedFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	root, err := binaries.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	operator, suite := filepath.Join(tmp, "gpulab-operator-faulty"), filepath.Join(tmp, "gpulab-conformance")
	build := func(args ...string) {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	build("build", "-tags", "gpulab_faults", "-o", operator, "./operator/cmd/gpulab-operator")
	build("test", "-c", "-o", suite, "./conformance")

	for fault, want := range map[string]string{
		"pods-before-podgroup": "before its PodGroup",
		"duplicate-pod":        "duplicate pod",
	} {
		t.Run(fault, func(t *testing.T) {
			out := filepath.Join(tmp, fault)
			cmd := exec.Command(suite, "--profile=local", "--scale=1", "--testbed-name=gpulab-faults",
				"--operator-binary="+operator, "--out="+out,
				"--feature=controller", "--assess=a valid GPUCluster reaches Ready")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GPULAB_PLANTED_FAULT="+fault)
			log, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed an operator with the %s fault:\n%s", fault, tail(log))
			}
			r, readErr := results.Read(filepath.Join(out, "results.json"))
			if readErr != nil {
				t.Fatalf("suite failed without results (%v): %v\n%s", err, readErr, tail(log))
			}
			found := false
			for _, f := range r.Features {
				for _, m := range f.Messages {
					found = found || strings.Contains(m, want)
				}
			}
			if !found {
				t.Errorf("the suite failed, but no message names the fault (%q):\n%s\nsuite output:\n%s", want, r.Markdown(), tail(log))
			}
		})
	}
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}
