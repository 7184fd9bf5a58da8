package kind

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/repo"
)

// suiteRunsInCluster is the in-cluster runner end to end on a real cluster:
// `gpulab-conformance submit` creates the shipped RBAC and a Job whose pod
// runs the suite as the gpulab-conformance ServiceAccount; retrieve brings
// its results back, PASSED: with --disruptive the controller feature kills
// the operator's leader pod mid-creation, so robust_controller is
// evidenced whole; cleanup leaves nothing of the run or the runner.
func suiteRunsInCluster(ctx context.Context, t *testing.T, c *Cluster, cs kubernetes.Interface) {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	refs, err := BuildConformanceImage(ctx, c.opts.CacheDir, root, c.opts.Log)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadImages(ctx, refs[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("suite image %v built and loaded in %s", refs, time.Since(start).Round(time.Second))
	suite := filepath.Join(c.opts.CacheDir, "kind", "build", "bin", "gpulab-conformance")
	cli := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, suite, append(args, "--kubeconfig="+c.Kubeconfig())...)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gpulab-conformance %v: %v", args, err)
		}
		return string(out), code
	}

	// The plan first, as a user would: on this cluster, with --disruptive,
	// the requirements table says robust_controller can be evidenced.
	plan, code := cli("run", "--profile=cluster", "--dry-run", "--disruptive", "--image="+WorkloadImage)
	if code != 0 || !strings.Contains(plan, "requirements (asked ones this run cannot evidence make it PARTIAL") ||
		!regexp.MustCompile(`(?m)^  robust_controller +asked +can be evidenced$`).MatchString(plan) {
		t.Errorf("--dry-run on kind: exit %d, want 0 and the requirements table with robust_controller evidenced:\n%s", code, plan)
	}

	start = time.Now()
	out, code := cli("submit", "--runner-image="+ConformanceImage, "--runner-pull-policy=Never",
		"--image="+WorkloadImage, "--submitter-image="+WorkloadImage, "--feature=^controller$", "--requirements=robust_controller", "--disruptive", "--timeout=10m")
	t.Logf("submit exited %d after %s", code, time.Since(start).Round(time.Second))
	m := regexp.MustCompile(`run (\S+) submitted`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("submit printed no run id (exit %d):\n%s", code, out)
	}
	runID := m[1]
	if code != results.ExitPassed {
		t.Errorf("submit: exit %d, want the run's 0 (PASSED):\n%s", code, out)
	}
	for _, want := range []string{"created ClusterRoleBinding gpulab-conformance", "results stored in ConfigMap", "run finished: "} {
		if !strings.Contains(out, want) {
			t.Errorf("submit's output lacks %q:\n%s", want, out)
		}
	}

	status, code := cli("status", "--run-id="+runID)
	if code != 0 || !strings.Contains(status, "Finished") {
		t.Errorf("status: exit %d: %s", code, status)
	}
	dir := t.TempDir()
	if got, code := cli("retrieve", "--run-id="+runID, "--to="+dir); code != 0 {
		t.Fatalf("retrieve: exit %d: %s", code, got)
	}
	r, err := results.Read(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != results.VerdictPassed {
		t.Errorf("the retrieved run is %s, want PASSED:\n%s", r.Verdict, r.Markdown())
	}
	for _, f := range []string{"junit.xml", "report.html", "PRODUCT.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("retrieve brought no %s: %v", f, err)
		}
	}

	if got, code := cli("cleanup", "--run-id="+runID); code != 0 {
		t.Errorf("cleanup: exit %d: %s", code, got)
	}
	// Nothing of the runner is left: its namespace goes (with the Job's pod
	// and the ConfigMap), and so do the roles submit created.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "gpulab-conformance", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner namespace is still there 2m after cleanup: %v", err)
		}
		time.Sleep(time.Second)
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "gpulab-conformance", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ClusterRole submit created is still there: %v", err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "conformance.gpulab.io/run-id=" + runID})
	if err != nil {
		t.Fatal(err)
	}
	if left := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }); len(left) > 0 {
		t.Errorf("%d pods of run %s left", len(left), runID)
	}
}
