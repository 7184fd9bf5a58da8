package conformance

import (
	"context"
	"fmt"
	"os"

	"github.com/gpulab/gpulab/conformance/runlock"
)

// runLock is the run's marker and, unless --allow-concurrent, the
// cluster's run lock (conformance/runlock), held from the preflight to the
// end of the run's cleanup.
var runLock *runlock.Run

// takeRunLock records the run and takes the cluster's run lock: a second
// run waits (--lock-wait) or fails naming the holder, so two runs never
// size their pools from the same free capacity or measure each other.
func takeRunLock(ctx context.Context) error {
	r, err := runlock.Start(ctx, runlock.Options{Client: cluster.Client, Namespace: opts.LockNamespace, RunID: opts.RunID,
		Wait: opts.LockWait, AllowConcurrent: opts.AllowConcurrent, Log: prefixed{os.Stdout, "run lock: "}})
	if err != nil {
		return fmt.Errorf("run lock: %w", err)
	}
	runLock = r
	if opts.AllowConcurrent {
		fmt.Println("run lock: not taken (--allow-concurrent); the run is recorded for cleanup")
	} else {
		fmt.Printf("run lock: run %s holds the cluster (Lease %s/%s)\n", opts.RunID, opts.LockNamespace, runlock.LockName)
	}
	return nil
}

// releaseRunLock ends the run's hold once its cleanup is done, and puts
// what the results should know about it (--allow-concurrent, a lock lost
// on the way) in their warnings.
func releaseRunLock(ctx context.Context) error {
	if runLock == nil {
		return nil
	}
	err := runLock.Release(ctx)
	mu.Lock()
	run.Warnings = append(run.Warnings, runLock.Warnings()...)
	mu.Unlock()
	runLock = nil
	return err
}
