// Package faults proves the conformance suite catches a broken operator: it
// runs the real suite against an operator built with -tags gpulab_faults,
// once per planted fault (GPULAB_PLANTED_FAULT, see
// operator/internal/faults), and expects it to fail, naming the fault; and
// once with no fault planted, where the same assessments must pass.
package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/internal/testbin"
	"github.com/gpulab/gpulab/testbeds/local"
	"github.com/gpulab/gpulab/testbeds/local/localtest"
)

// The assessments that catch the faults, each the smallest that shows one.
var (
	validReady = []string{"--feature=^controller$", "--assess=a valid GPUCluster reaches Ready"}
	// Four gangs contend for the room of two: with minMember 1 Volcano binds
	// them partly (heads anywhere, workers where GPUs are left). A partly
	// bound gang may never finish, so its wait is kept short.
	contention = []string{"--feature=^gang$", "--assess=K gangs contending", "--ready-timeout=15s"}
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
	root, operator, suite string
)

func TestMain(m *testing.M) {
	// The tests read the testbed with controller-runtime's client; its
	// logs are not wanted here.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// build makes the operator with the planted faults and the suite binary,
// once for every test here.
func build(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		if root, buildErr = repo.Root(); buildErr != nil {
			return
		}
		ctx := context.Background()
		if operator, buildErr = testbin.Build(ctx, "faults/gpulab-operator-faulty", "./operator/cmd/gpulab-operator", "build", "-tags", "gpulab_faults"); buildErr != nil {
			return
		}
		// The suite's own planted faults (a Volcano Job's minAvailable)
		// are only in builds with the tag, too.
		suite, buildErr = testbin.Build(ctx, "faults/gpulab-conformance", "./conformance", "test", "-c", "-tags", "gpulab_faults")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// runSuite runs the suite on the local testbed (--scale=1) against the
// faulty operator with fault planted ("" for none).
func runSuite(fault, out string, args ...string) ([]byte, error) {
	return runSuiteWith([]string{"GPULAB_PLANTED_FAULT=" + fault}, out, args...)
}

// runSuiteWith runs the suite like runSuite with env added to its
// environment.
func runSuiteWith(env []string, out string, args ...string) ([]byte, error) {
	cmd := exec.Command(suite, append([]string{"--profile=local", "--scale=1", "--testbed-name=gpulab-faults",
		"--operator-binary=" + operator, "--out=" + out}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

func TestSuiteCatchesPlantedFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	t.Parallel()
	build(t)
	tmp := t.TempDir()
	// One testbed for every case, each run against its own operator (the
	// suite's cluster profile): the suite deletes what it made, and the
	// operator releases its Lease when stopped.
	fleet, err := local.ParseFleet("dgx-h100=4")
	if err != nil {
		t.Fatal(err)
	}
	tb := localtest.Start(t, local.Options{Name: "gpulab-faults", Fleet: fleet})
	for _, tc := range faultCases {
		t.Run(tc.fault, func(t *testing.T) {
			out := filepath.Join(tmp, tc.fault)
			log, err := runOn(t, tb, "operator-"+strings.ReplaceAll(tc.fault, " ", "-"), tc.fault, out, tc.args...)
			if err == nil {
				t.Fatalf("the suite passed an operator with the %s fault:\n%s", tc.fault, tail(log))
			}
			r, readErr := results.Read(filepath.Join(out, "results.json"))
			if readErr != nil {
				t.Fatalf("suite failed without results (%v): %v\n%s", err, readErr, tail(log))
			}
			found := false
			for _, f := range r.Features {
				for _, m := range f.Messages() {
					found = found || strings.Contains(m, tc.want)
				}
			}
			if r.Verdict != results.VerdictFailed || exitCode(err) != results.ExitFailed {
				t.Errorf("verdict %s, exit %d; want FAILED, exit 1", r.Verdict, exitCode(err))
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
		log, err := runOn(t, tb, "operator-", "", out, "--feature=^(controller|gang)$", "--assess=a valid GPUCluster reaches Ready|K gangs contending")
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
		// Only what --assess asked for is reported, and it all passed.
		for _, f := range r.Features {
			if len(f.Assessments) != 1 || f.Assessments[0].Status != results.StatusPassed {
				t.Errorf("feature %s: %+v, want the one assessment asked for, passed", f.Name, f.Assessments)
			}
		}
		if r.Verdict != results.VerdictPassed {
			t.Errorf("verdict %s, want PASSED:\n%s", r.Verdict, r.Markdown())
		}
	})
}

// runOn runs the suite's cluster profile against tb with its own operator
// (named name, fault planted; "" for none), stopped when the run ends: the
// suite deletes what it made, and the operator releases its Lease.
func runOn(t *testing.T, tb *local.Testbed, name, fault, out string, args ...string) ([]byte, error) {
	t.Helper()
	op, err := profile.StartOperator(t.Context(), profile.OperatorOptions{Name: name,
		Binary: operator, Kubeconfig: tb.Kubeconfig(), LogDir: filepath.Dir(out), Env: []string{"GPULAB_PLANTED_FAULT=" + fault}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := op.Stop(); err != nil {
			t.Errorf("stopping the operator: %v", err)
		}
	}()
	cmd := exec.Command(suite, append([]string{"run", "--profile=cluster", "--kubeconfig=" + tb.Kubeconfig(),
		"--operator-namespace=default", "--max-gpus=all", "--out=" + out}, args...)...)
	cmd.Dir = root
	return cmd.CombinedOutput()
}

// TestPartialRun: on a fleet of one 8-GPU node, every gang assessment asked
// for cannot run. The run must say so: each assessment skipped with its
// reason, the feature and KAR-0053 partial, the verdict PARTIAL, exit 3.
func TestPartialRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	t.Parallel()
	build(t)
	out := t.TempDir()
	log, err := runSuite("", out, "--fleet=dgx-h100=1", "--feature=^gang$", "--testbed-name=gpulab-partial")
	if code := exitCode(err); code != results.ExitPartial {
		t.Fatalf("exit %d (%v), want %d (partial):\n%s", code, err, results.ExitPartial, tail(log))
	}
	r, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != results.VerdictPartial || len(r.Features) != 1 || r.Features[0].Name != "gang" || r.Features[0].Status != results.StatusPartial {
		t.Fatalf("verdict %s, features %+v; want PARTIAL, gang partial:\n%s", r.Verdict, r.Features, r.Markdown())
	}
	if n := len(r.Features[0].Assessments); n != 4 {
		t.Errorf("%d gang assessments reported, want 4", n)
	}
	for _, a := range r.Features[0].Assessments {
		if a.Status != results.StatusSkipped || a.Reason != "needs 2 whole free 8-GPU nodes in the footprint, found 1" || a.Requirement != results.RequirementGangScheduling {
			t.Errorf("assessment %+v, want skipped for capacity, evidencing gang_scheduling", a)
		}
	}
	for _, e := range r.Evidence {
		want := results.StatusNotTested
		if e.Requirement == results.RequirementGangScheduling {
			want = results.StatusPartial
		}
		if e.Status != want {
			t.Errorf("%s evidence %s, want %s", e.Requirement, e.Status, want)
		}
	}
	junit, err := os.ReadFile(filepath.Join(out, "junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(junit), `<skipped message="needs 2 whole free 8-GPU nodes in the footprint, found 1">`); n != 4 {
		t.Errorf("junit.xml has %d skipped cases with the reason, want 4:\n%s", n, junit)
	}
	if !strings.Contains(string(log), "# gpulab conformance: PARTIAL") || !strings.Contains(string(log), "conformance: PARTIAL (exit 3)") {
		t.Errorf("the printed summary lacks the verdict:\n%s", tail(log))
	}
}

// exitCode is a finished command's exit status (0 when it succeeded, -1
// when it did not run or was killed).
func exitCode(err error) int {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		return -1
	}
}

// TestSuiteRejectsBadFlags: a window or timeout that is not positive, and a
// kubeconfig that cannot be read or reached, are reported as such before
// anything runs.
func TestSuiteRejectsBadFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the conformance suite; skipped with -short")
	}
	t.Parallel()
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
		// setup: the flags parse, the profile's setup fails: a FAILED
		// report naming the error (exit 1); otherwise bad usage (exit 2).
		setup bool
	}{
		{[]string{"--wait-window=0"}, "--wait-window must be positive, got 0s", false},
		{[]string{"--ready-timeout=-1s"}, "--ready-timeout must be positive, got -1s", false},
		{[]string{"--fleet=dgx-h100=1", "--profile=cluster", "--kubeconfig=" + unreachable}, "--fleet sizes the local testbed", false},
		{[]string{"--fleet=dgx-z9=1"}, "--fleet:", false},
		{[]string{"--profile=cluster", "--kubeconfig=" + filepath.Join(t.TempDir(), "missing")}, "reading --kubeconfig", true},
		{[]string{"--profile=cluster", "--kubeconfig=" + unreachable}, "cannot talk to the API server at " + closed, true},
	} {
		dir := t.TempDir()
		cmd := exec.Command(suite, append(tc.args, "--out="+dir)...)
		out, err := cmd.CombinedOutput()
		want := results.ExitUsage
		if tc.setup {
			want = results.ExitFailed
		}
		if code := exitCode(err); code != want || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "lacks") {
			t.Errorf("suite %v: exit %d (%v), want %d saying %q:\n%s", tc.args, code, err, want, tc.want, tail(out))
			continue
		}
		if !tc.setup {
			continue
		}
		r, err := results.Read(filepath.Join(dir, "results.json"))
		if err != nil {
			t.Errorf("suite %v: a setup failure wrote no results: %v", tc.args, err)
			continue
		}
		if r.Verdict != results.VerdictFailed || len(r.Features) != 1 || r.Features[0].Name != "setup" ||
			r.Features[0].Status != results.StatusFailed || !strings.Contains(r.Features[0].Assessments[0].Reason, tc.want) {
			t.Errorf("suite %v: results %+v, want FAILED with a failed setup saying %q", tc.args, r.Features, tc.want)
		}
		if !strings.Contains(string(out), "# gpulab conformance: FAILED") {
			t.Errorf("suite %v: the printed summary lacks the verdict:\n%s", tc.args, tail(out))
		}
	}
	// Results that cannot be written or pushed are errors on stderr.
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--out=" + filepath.Join(notADir, "out")}, "conformance: writing results: "},
		{[]string{"--out=" + t.TempDir(), "--pushgateway-url=" + closed}, "conformance: pushing results to " + closed},
	} {
		cmd := exec.Command(suite, append([]string{"--profile=cluster", "--kubeconfig=" + unreachable}, tc.args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		if code := exitCode(err); code != results.ExitFailed || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("suite %v: exit %d, want 1 with %q on stderr:\n%s", tc.args, code, tc.want, tail([]byte(stderr.String())))
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

// autoscalingScaleUp is the autoscaling feature's scale-up, on a cluster
// whose nodes are two DGX H100s outside Karpenter's 16-GPU NodePool.
var autoscalingScaleUp = []string{"--feature=^autoscaling$", "--assess=a gang larger than the free nodes", "--autoscaler=karpenter",
	"--nodepool=" + local.KarpenterNodePool, "--disruptive", "--max-new-nodes=2", "--ready-timeout=30s"}

// TestPlantedMinMemberFailsAutoscaling: with a PodGroup minMember below
// the gang (the operator's wrong-minmember fault), a gang waiting for the
// nodes Karpenter adds is bound partly (its head at once, its workers as
// nodes come), and the autoscaling feature must fail for it; with no fault
// planted the same assessment passes.
func TestPlantedMinMemberFailsAutoscaling(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed with Karpenter; skipped with -short")
	}
	testbin.SkipUnlessLong(t)
	t.Parallel()
	build(t)
	tmp := t.TempDir()
	fleet, err := local.ParseFleet("dgx-h100=2")
	if err != nil {
		t.Fatal(err)
	}
	tb := localtest.Start(t, local.Options{Name: "gpulab-faults-asc", Fleet: fleet, Autoscaler: local.AutoscalerKarpenter})
	c, err := tb.Client()
	if err != nil {
		t.Fatal(err)
	}
	// The control first, on a NodePool with no node yet.
	for _, fault := range []string{"", "wrong-minmember"} {
		name := cmp.Or(fault, "no-fault")
		// Each run starts from a NodePool with no node: the previous
		// run's nodes go once Karpenter
		// consolidates them (30 s after they empty). A run that starts
		// beside empty nodes of the NodePool counts them as free, and
		// Karpenter then added fewer nodes than the gang lacked (seen
		// 2026-12-07; not yet understood, see docs/conformance/features.md).
		if err := poll.Until(t.Context(), 3*time.Minute, func() (bool, string) {
			var nodes corev1.NodeList
			if err := c.List(t.Context(), &nodes, client.HasLabels{karpenter.NodePoolLabel}); err != nil {
				return false, err.Error()
			}
			return len(nodes.Items) == 0, fmt.Sprintf("%d nodes of the NodePool left", len(nodes.Items))
		}); err != nil {
			t.Fatalf("before the %s run: %v", name, err)
		}
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(tmp, name)
			log, err := runOn(t, tb, "operator-asc-"+name, fault, out, autoscalingScaleUp...)
			r, readErr := results.Read(filepath.Join(out, "results.json"))
			if readErr != nil {
				t.Fatalf("suite exited %d without results (%v):\n%s", exitCode(err), readErr, tail(log))
			}
			if fault == "" {
				if err != nil || r.Verdict != results.VerdictPassed {
					t.Fatalf("no fault planted: verdict %s, exit %d; want PASSED:\n%s\n%s", r.Verdict, exitCode(err), r.Markdown(), tail(log))
				}
				return
			}
			found := false
			for _, f := range r.Features {
				for _, m := range f.Messages() {
					found = found || strings.Contains(m, "partly bound")
				}
			}
			if r.Verdict != results.VerdictFailed || exitCode(err) != results.ExitFailed || !found {
				t.Errorf("minMember below the gang: verdict %s, exit %d, partly bound named %v; want FAILED for a partly bound gang:\n%s\n%s",
					r.Verdict, exitCode(err), found, r.Markdown(), tail(log))
			}
		})
	}
}
