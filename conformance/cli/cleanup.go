package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/scheme"
)

// cleanupCommand deletes what a run left on a cluster, found by its run
// label: after a run that was killed (SIGKILL, a node lost, a pod evicted)
// and so never ran its own cleanup. Exit 0 when everything selected is
// gone, 1 when something could not be deleted or did not go in time, 2 on
// bad usage.
func cleanupCommand(args []string, stdout, stderr io.Writer) int {
	const usage = "gpulab-conformance cleanup (--run-id ID | --all-runs) [--runner-namespace NS] [--kubeconfig FILE] [--context NAME] [--timeout D] [--dry-run]"
	fs := newCommandFlags("cleanup", stderr, usage)
	runID := fs.String("run-id", "", "the run whose objects to delete (the run prints it; objects carry "+cleanup.RunIDLabel+")")
	allRuns := fs.Bool("all-runs", false, "delete the objects of every run (anything with "+cleanup.RunIDLabel+")")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
	kubeContext := fs.String("context", "", "kubeconfig context (default its current context)")
	timeout := fs.Duration("timeout", 0, "how long the run's pods may take to go (default 3m, or 150ms a pod when more)")
	dryRun := fs.Bool("dry-run", false, "list what would be deleted and delete nothing")
	runnerNS := fs.String("runner-namespace", incluster.DefaultNamespace, "where submit ran the run: its Job and results go too, and the runner's shared RBAC and namespace once nothing uses them")
	if code, ok := parseCommandFlags(fs, args); !ok {
		return code
	}
	if (*runID == "") == !*allRuns || fs.NArg() > 0 || *timeout < 0 {
		fmt.Fprintf(stderr, "usage: %s\n", usage)
		return results.ExitUsage
	}
	cfg, name, err := profile.LoadConfig(*kubeconfig, *kubeContext)
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance cleanup: %v\n", err)
		return results.ExitUsage
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance cleanup: %v\n", err)
		return results.ExitFailed
	}
	// A signal stops the wait; what was deleted stays deleted.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	which := "run " + *runID
	if *allRuns {
		which = "every run"
	}
	fmt.Fprintf(stdout, "cleanup of %s on %s (%s)\n", which, name, cfg.Host)
	start := time.Now()
	rep, err := cleanup.Run(ctx, cleanup.Options{Client: c, RunID: *runID, AllRuns: *allRuns, Timeout: *timeout, DryRun: *dryRun, Log: stdout})
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance cleanup: %v\n", err)
		return results.ExitFailed
	}
	if len(rep.Found) == 0 {
		fmt.Fprintf(stdout, "nothing labelled for %s is left\n", which)
	} else if !*dryRun {
		fmt.Fprintf(stdout, "done in %.1f s\n", time.Since(start).Seconds())
	}
	// The runner's objects, the runs' markers, and the shared objects
	// once nothing uses them: listed, not deleted, with --dry-run.
	var ids []string
	if !*allRuns {
		ids = []string{*runID}
	}
	rr, err := incluster.CleanupRuns(ctx, c, incluster.CleanupOptions{Namespace: *runnerNS, RunIDs: ids, AllRuns: *allRuns, DryRun: *dryRun})
	verb := "deleted"
	if *dryRun {
		verb = "would delete"
	}
	for _, d := range rr.Deleted {
		fmt.Fprintf(stdout, "%s %s\n", verb, d)
	}
	for _, k := range rr.Kept {
		fmt.Fprintf(stdout, "keeps %s\n", k)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance cleanup: the runner: %v\n", err)
		return results.ExitFailed
	}
	return results.ExitPassed
}
