package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/testbeds/local"
)

// TestRunStaysInItsBudget: on 32 nodes (256 GPUs) with --max-gpus=16, a
// watch on every pod of the testbed never sees more than 16 GPUs bound at
// once, while the latency and gang features still pass inside that budget.
func TestRunStaysInItsBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	t.Parallel()
	build(t)
	const name, budget = "gpulab-footprint", 16
	tb, err := local.New(local.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	peak := make(chan int, 1)
	go func() { peak <- watchBoundGPUs(ctx, tb.Kubeconfig()) }()
	out := t.TempDir()
	log, err := runSuite("", out, "--fleet=dgx-h100=32", fmt.Sprintf("--max-gpus=%d", budget), "--scale=4",
		"--feature=^(latency|gang)$", "--testbed-name="+name)
	cancel()
	most := <-peak
	if err != nil {
		t.Fatalf("the run failed (exit %d):\n%s", exitCode(err), tail(log))
	}
	r, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != results.VerdictPassed || len(r.Features) != 2 {
		t.Errorf("verdict %s with %d features, want PASSED with latency and gang:\n%s", r.Verdict, len(r.Features), r.Markdown())
	}
	// More than one node's worth shows the budget was used, not avoided.
	if most > budget || most <= 8 {
		t.Errorf("at most %d GPUs were bound at once, want more than 8 and at most %d", most, budget)
	}
	t.Logf("at most %d GPUs bound at once (budget %d)", most, budget)
}

// watchBoundGPUs follows every pod of the cluster behind kubeconfig (once
// it exists) until ctx ends, and returns the most GPUs that bound, live
// pods requested at any one time.
func watchBoundGPUs(ctx context.Context, kubeconfig string) int {
	bound := map[string]int64{} // by namespace/name
	most := 0
	update := func(p *corev1.Pod, gone bool) {
		key := p.Namespace + "/" + p.Name
		delete(bound, key)
		if !gone && p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			for _, ctr := range p.Spec.Containers {
				q, ok := ctr.Resources.Requests[gfd.GPUResource]
				if !ok {
					q = ctr.Resources.Limits[gfd.GPUResource]
				}
				bound[key] += q.Value()
			}
		}
		var sum int64
		for _, n := range bound {
			sum += n
		}
		most = max(most, int(sum))
	}
	for ctx.Err() == nil {
		cs, err := clientsetFor(kubeconfig)
		if err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		// List, then watch from there; a broken watch lists again.
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		clear(bound)
		for i := range pods.Items {
			update(&pods.Items[i], false)
		}
		w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				update(p, ev.Type == watch.Deleted)
			}
		}
		w.Stop()
	}
	return most
}

func clientsetFor(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// TestInterruptedRunCleansUp: SIGTERM in the middle of a run ends it
// FAILED (interrupted), and before it exits it has deleted everything it
// created: the testbed is kept (--keep) to look.
func TestInterruptedRunCleansUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suite on the local testbed; skipped with -short")
	}
	t.Parallel()
	build(t)
	const name = "gpulab-interrupt"
	tb, err := local.New(local.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Down(context.Background()); err != nil {
			t.Errorf("testbed down: %v", err)
		}
	})
	out := t.TempDir()
	cmd := exec.Command(suite, "--profile=local", "--fleet=dgx-h100=4", "--scale=4", "--feature=^latency$", "--keep",
		"--testbed-name="+name, "--operator-binary="+operator, "--out="+out)
	cmd.Dir = root
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Signal once the run has created a GPUCluster.
	var c client.Client
	err = poll.Until(t.Context(), 5*time.Minute, func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			return true, ""
		default:
		}
		if c == nil {
			if c, err = tb.Client(); err != nil {
				c = nil
				return false, err.Error()
			}
		}
		var gcs gpulabv1alpha1.GPUClusterList
		if err := c.List(t.Context(), &gcs); err != nil {
			return false, err.Error()
		}
		return len(gcs.Items) > 0, "no GPUCluster yet"
	})
	if err != nil || c == nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the run never created a GPUCluster: %v\n%s", err, tail([]byte(log.String())))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the run did not stop within 5 minutes of SIGTERM:\n%s", tail([]byte(log.String())))
	}
	if code := exitCode(err); code != results.ExitFailed {
		t.Errorf("exit %d after SIGTERM, want %d:\n%s", code, results.ExitFailed, tail([]byte(log.String())))
	}
	r, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatalf("an interrupted run wrote no results: %v", err)
	}
	interrupted := false
	for _, f := range r.Features {
		for _, a := range f.Assessments {
			interrupted = interrupted || (a.Status == results.StatusFailed && a.Reason == "interrupted by terminated")
		}
	}
	if r.Verdict != results.VerdictFailed || !interrupted {
		t.Errorf("verdict %s, want FAILED with the interruption named:\n%s", r.Verdict, r.Markdown())
	}
	// Nothing the run made is left: the suite waited for its pods before
	// exiting; its namespaces may still be finishing their deletion.
	ctx := context.Background()
	var gcs gpulabv1alpha1.GPUClusterList
	var pods corev1.PodList
	var queues schedulingv1beta1.QueueList
	var nss corev1.NamespaceList
	for _, list := range []client.ObjectList{&gcs, &pods, &queues, &nss} {
		if err := c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
	}
	if len(gcs.Items) > 0 || len(pods.Items) > 0 {
		t.Errorf("%d GPUClusters and %d pods left after the interrupted run", len(gcs.Items), len(pods.Items))
	}
	for _, q := range queues.Items {
		if strings.HasPrefix(q.Name, "gpulab-conformance-") {
			t.Errorf("queue %s left after the interrupted run", q.Name)
		}
	}
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, "gpulab-conformance-") && ns.DeletionTimestamp == nil {
			t.Errorf("namespace %s left after the interrupted run", ns.Name)
		}
	}
	if t.Failed() {
		t.Logf("suite output:\n%s", tail([]byte(log.String())))
	}
}

// TestDryRunPrintsThePlan: --dry-run says what a run would use, with the
// requirements table of docs/conformance/cluster.md's "What PASSED needs",
// and creates nothing (here: not even the local testbed).
func TestDryRunPrintsThePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the conformance suite; skipped with -short")
	}
	t.Parallel()
	build(t)
	const name = "gpulab-dry-run"
	tb, err := local.New(local.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(suite, "run", "--dry-run", "--fleet=dgx-h100=32,dgx-a100=2", "--max-gpus=20", "--testbed-name="+name, "--out="+t.TempDir())
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, want := range []string{
		"footprint: --max-gpus=20: 2 nodes, 16 GPUs, 16 free, 2 whole free 8-GPU nodes",
		"latency      create at once: 2 x (1 head + 2 workers x 4 GPUs) = 16 GPUs",
		"overcommitted: 2 gangs of 2 x 8 GPUs, 1 fit at once",
		"run-id=",
		"requirements (asked ones this run cannot evidence make it PARTIAL",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the plan lacks %q:\n%s", want, out)
		}
	}
	// The local testbed serves DRA devices, so its run asks for
	// dra_support and can evidence it.
	if !regexp.MustCompile(`(?m)^  dra_support +asked +can be evidenced$`).Match(out) {
		t.Errorf("the requirements table has no dra_support line that can be evidenced:\n%s", out)
	}
	if _, err := os.Stat(tb.Workdir()); !os.IsNotExist(err) {
		t.Errorf("a dry run created the testbed's directory %s (%v)", tb.Workdir(), err)
	}
}
