// Package faults proves the conformance suite catches a broken operator: it
// runs the real suite against an operator built with -tags gpulab_faults,
// once per planted fault (GPULAB_PLANTED_FAULT, see
// operator/internal/faults), and expects it to fail, naming the fault; and
// once with no fault planted, where the same assessments must pass.
package faults

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local/binaries"
)

// The assessments that catch the faults, each the smallest that shows one.
var (
	validReady = []string{"--feature=^controller$", "--assess=a valid GPUCluster reaches Ready"}
	// Four gangs contend for the room of two: with minMember 1 Volcano binds
	// them partly (heads anywhere, workers where GPUs are left). A partly
	// bound gang may never finish, so its wait is kept short.
	contention = []string{"--feature=^gang$", "--assess=K gangs contending", "--ready-timeout=30s"}
)

var faultCases = []struct {
	fault string
	args  []string
	want  string // in a failure message of the suite
}{
	{"pods-before-podgroup", validReady, "before its PodGroup"},
	{"duplicate-pod", validReady, "duplicate pod"},
	{"pod-after-podgroup-deleted", validReady, "after its PodGroup was deleted"},
	{"ready-early", validReady, "status claimed Ready"},
	{"wrong-minmember", contention, "partly bound"},
}

var (
	buildOnce             sync.Once
	buildErr              error
	binDir                string
	root, operator, suite string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpulab-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build makes the operator with the planted faults and the suite binary,
// once for every test here.
func build(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		if root, buildErr = binaries.ModuleRoot(); buildErr != nil {
			return
		}
		operator, suite = filepath.Join(binDir, "gpulab-operator-faulty"), filepath.Join(binDir, "gpulab-conformance")
		for _, args := range [][]string{
			{"build", "-tags", "gpulab_faults", "-o", operator, "./operator/cmd/gpulab-operator"},
			{"test", "-c", "-o", suite, "./conformance"},
		} {
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %v: %w\n%s", args, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// runSuite runs the suite on the local testbed (--scale=1) against the
// faulty operator with fault planted ("" for none).
func runSuite(fault, out string, args ...string) ([]byte, error) {
	cmd := exec.Command(suite, append([]string{"--profile=local", "--scale=1", "--testbed-name=gpulab-faults",
		"--operator-binary=" + operator, "--out=" + out}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GPULAB_PLANTED_FAULT="+fault)
	return cmd.CombinedOutput()
}

func TestSuiteCatchesPlantedFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	build(t)
	tmp := t.TempDir()
	for _, tc := range faultCases {
		t.Run(tc.fault, func(t *testing.T) {
			out := filepath.Join(tmp, tc.fault)
			log, err := runSuite(tc.fault, out, tc.args...)
			if err == nil {
				t.Fatalf("the suite passed an operator with the %s fault:\n%s", tc.fault, tail(log))
			}
			r, readErr := results.Read(filepath.Join(out, "results.json"))
			if readErr != nil {
				t.Fatalf("suite failed without results (%v): %v\n%s", err, readErr, tail(log))
			}
			found := false
			for _, f := range r.Features {
				for _, m := range f.Messages {
					found = found || strings.Contains(m, tc.want)
				}
			}
			if !found {
				t.Errorf("the suite failed, but no message names the fault (%q):\n%s\nsuite output:\n%s", tc.want, r.Markdown(), tail(log))
			}
		})
	}
	// The same assessments pass on the same build with no fault planted:
	// the failures above are the faults', not the detectors' own.
	t.Run("no fault", func(t *testing.T) {
		out := filepath.Join(tmp, "no-fault")
		log, err := runSuite("", out, "--feature=^(controller|gang)$", "--assess=a valid GPUCluster reaches Ready|K gangs contending")
		if err != nil {
			t.Fatalf("the suite failed an operator with no fault planted: %v\n%s", err, tail(log))
		}
		r, err := results.Read(filepath.Join(out, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Features) != 2 {
			t.Fatalf("%d features ran, want controller and gang:\n%s", len(r.Features), r.Markdown())
		}
	})
}

// TestSuiteRejectsBadFlags: a window or timeout that is not positive, and a
// kubeconfig that cannot be read or reached, are reported as such before
// anything runs.
func TestSuiteRejectsBadFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the conformance suite; skipped with -short")
	}
	build(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, closed)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--wait-window=0"}, "--wait-window must be positive, got 0s"},
		{[]string{"--ready-timeout=-1s"}, "--ready-timeout must be positive, got -1s"},
		{[]string{"--profile=cluster", "--kubeconfig=" + filepath.Join(t.TempDir(), "missing")}, "reading --kubeconfig"},
		{[]string{"--profile=cluster", "--kubeconfig=" + unreachable}, "cannot talk to the API server at " + closed},
	} {
		cmd := exec.Command(suite, append(tc.args, "--out="+t.TempDir())...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "lacks") {
			t.Errorf("suite %v: %v, want a failure saying %q:\n%s", tc.args, err, tc.want, tail(out))
		}
	}
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}
