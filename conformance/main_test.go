package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/gpulab/gpulab/conformance/cli"
	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/version"
	"github.com/gpulab/gpulab/testbeds/local"
)

var (
	// opts is what `gpulab-conformance run` was asked (conformance/cli).
	opts *cli.RunOptions

	testenv env.Environment
	cluster *profile.Environment

	// mu guards run and the recording in plan_test.go.
	mu  sync.Mutex
	run = &results.Results{SchemaVersion: results.SchemaVersion}
	// setupErr, teardownErr and interrupted are what the Setup and Finish
	// steps could not do and the signal that stopped the run; e2e-framework
	// only logs the first two. stopped is why the run's context had ended
	// when it finished (a signal or --timeout), else nil.
	setupErr, teardownErr error
	interrupted           os.Signal
	stopped               error
)

func TestMain(m *testing.M) {
	o, code := cli.Main(os.Args[1:], os.Stdout, os.Stderr)
	if o == nil {
		os.Exit(code)
	}
	opts = o
	// Before any client exists: the suite's own throttling is measured.
	measure.EnableClientThrottle()
	// Go's testing flags are all that is left for flag.CommandLine.
	os.Args = append(os.Args[:1], o.TestArgs...)
	flag.Parse()
	if testing.Short() {
		fmt.Println("conformance: skipped with -short (it brings up a cluster)")
		os.Exit(0)
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(results.ExitUsage)
	}
	// SIGINT or SIGTERM cancels every wait; the run then cleans up what it
	// created and reports FAILED. A second signal kills it.
	ctx, cancel := context.WithCancelCause(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		signal.Stop(signals) // the next one gets Go's default: exit
		mu.Lock()
		interrupted = sig
		mu.Unlock()
		fmt.Fprintf(os.Stderr, "conformance: %s: stopping, cleaning up what the run created (again to kill)\n", sig)
		cancel(fmt.Errorf("%s signal received", sig))
	}()
	// The suite's own deadline: every wait ends there, then the Finish
	// step cleans up and report writes a FAILED run. Go's -test.timeout,
	// which would panic instead, is only a backstop (cli.BackstopGrace).
	ctx, stopDeadline := o.Deadline(ctx)
	run.Environment = withSuiteVersion(results.Environment{Profile: o.Profile, Scale: o.Scale, ClusterName: o.ClusterName})
	run.Requested, run.Unavailable = results.Requested(o.Ask()), results.Unavailable(o.Ask())
	run.RequirementsSelected = o.Requirements != nil
	cfg := envconf.New()
	// An empty regexp would match every name: set only the filters given.
	for _, filter := range []struct {
		re  string
		set func(string) *envconf.Config
	}{{o.Features, cfg.WithFeatureRegex}, {o.SkipFeatures, cfg.WithSkipFeatureRegex}, {o.Assess, cfg.WithAssessmentRegex}, {o.SkipAssess, cfg.WithSkipAssessmentRegex}} {
		if filter.re != "" {
			filter.set(filter.re)
		}
	}
	if testenv, err = env.NewWithContext(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stopDeadline()
		os.Exit(results.ExitFailed)
	}
	testenv.Setup(func(ctx context.Context, c *envconf.Config) (context.Context, error) {
		run.StartTime = time.Now()
		var err error
		cluster, err = profile.Setup(ctx, profile.Options{
			Profile: o.Profile, Kubeconfig: o.Kubeconfig, Context: o.Context, Scale: o.Scale, Fleet: o.Fleet,
			OutDir: filepath.Join(out, "logs"), OperatorBinary: o.OperatorBinary, Keep: o.Keep, Log: os.Stdout,
			TestbedName: o.TestbedName, OperatorNamespace: o.OperatorNamespace, Workload: o.Workload, OperatorMetricsURL: o.OperatorMetricsURL,
			ClientQPS: o.ClientQPS, NativeGangs: o.Scheduler == "kubernetes", DRAGangs: o.GPUAllocation == "dra", DeviceClass: o.DeviceClass,
			Autoscaler: localAutoscaler(),
		})
		if err != nil {
			setupErr = fmt.Errorf("profile %s: %w", o.Profile, err)
			return ctx, setupErr
		}
		fmt.Printf("run %s: everything it creates carries %s=%s (after a kill: gpulab-conformance cleanup --run-id %s)\n",
			o.RunID, RunIDLabel, o.RunID, o.RunID)
		run.Environment = withSuiteVersion(cluster.Describe(ctx, o.Scale, o.ClusterName))
		// After the preflight, before the pool is sized from free capacity.
		if setupErr = takeRunLock(ctx); setupErr != nil {
			return ctx, setupErr
		}
		if setupErr = startClaimWatch(ctx); setupErr != nil {
			return ctx, setupErr
		}
		if setupErr = setupFootprint(ctx); setupErr != nil {
			return ctx, setupErr
		}
		resolveAutoscaler(ctx)
		return ctx, nil
	})
	testenv.BeforeEachFeature(beforeFeature)
	testenv.AfterEachFeature(afterFeature)
	testenv.Finish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		run.EndTime = time.Now()
		if ctx.Err() != nil {
			mu.Lock()
			stopped = context.Cause(ctx)
			mu.Unlock()
		}
		if claimWatch != nil {
			claimWatch.Stop()
		}
		if cluster != nil {
			teardownErr = errors.Join(cleanupRun(context.WithoutCancel(ctx)), releaseRunLock(context.WithoutCancel(ctx)),
				cluster.Teardown(context.WithoutCancel(ctx)))
		}
		return ctx, teardownErr
	})
	if o.DryRun {
		code = dryRun(ctx)
		stopDeadline()
		os.Exit(code)
	}
	code = testenv.Run(m)
	// report runs on no context: results are written past the deadline too.
	stopDeadline()
	os.Exit(report(code, out))
}

// report writes and prints the run's results, pushes them if asked, and
// returns the exit code: the verdict's (0 passed, 1 failed, 3 partial),
// or 1 when the results could not be written or pushed, the cluster not
// torn down, or the tests failed outside every recorded assessment.
func report(testsCode int, out string) int {
	if run.StartTime.IsZero() {
		run.StartTime = time.Now()
	}
	if run.EndTime.IsZero() {
		run.EndTime = time.Now()
	}
	if setupErr != nil {
		// A setup failure is a failure, named, not an empty run.
		run.Features = append(run.Features, results.Feature{Name: "setup", Seconds: run.EndTime.Sub(run.StartTime).Seconds(),
			Assessments: []results.Assessment{{Name: "setup", Requirement: results.RequirementNone, Status: results.StatusFailed,
				Reason: setupErr.Error(), Messages: []string{setupErr.Error()}, Seconds: run.EndTime.Sub(run.StartTime).Seconds()}}})
	}
	run.Features = append(run.Features, recordedFeatures()...)
	mu.Lock()
	sig, cause := interrupted, stopped
	mu.Unlock()
	// What a signal or the deadline cut short is not a verdict on the
	// cluster, but the run did not test what it was asked: it fails.
	switch {
	case sig != nil:
		run.Features = append(run.Features, results.RunStopped("the run was not interrupted", fmt.Sprintf("interrupted by %s", sig)))
	case cli.IsTimeout(cause):
		run.Features = append(run.Features, results.RunStopped("the run finished within --timeout",
			fmt.Sprintf("%v: what it had not finished is reported skipped", cause)))
	}
	run.Finalize()
	var errs []error
	if err := run.Write(out); err != nil {
		errs = append(errs, err)
	}
	if opts.PerfData != "" {
		if _, err := run.WritePerfData(opts.PerfData); err != nil {
			errs = append(errs, err)
		}
	}
	if opts.ResultsConfigMap != "" {
		if err := storeResults(out); err != nil {
			errs = append(errs, err)
		}
	}
	fmt.Printf("\n%s\nresults: %s\n", run.Markdown(), out)
	if opts.PushgatewayURL != "" {
		if err := pushRun(opts.PushgatewayURL, opts.PushBaseline, run); err != nil {
			errs = append(errs, err)
		}
	}
	if teardownErr != nil {
		errs = append(errs, fmt.Errorf("tearing down the %s profile: %w", opts.Profile, teardownErr))
	}
	if testsCode != 0 && run.Verdict != results.VerdictFailed {
		errs = append(errs, fmt.Errorf("the tests exited %d outside every recorded assessment; see the log", testsCode))
	}
	code := results.ExitCode(run.Verdict)
	for _, err := range errs {
		fmt.Fprintf(os.Stderr, "conformance: %v\n", err)
		code = results.ExitFailed
	}
	fmt.Printf("conformance: %s (exit %d)\n", run.Verdict, code)
	return code
}

// storeResults packs out into --results-configmap, for retrieve: the
// in-cluster runner's pod and its folder go away after the run.
func storeResults(out string) error {
	ns, name, err := incluster.ParseConfigMapRef(opts.ResultsConfigMap)
	if err != nil {
		return err
	}
	cfg, _, err := profile.LoadConfig(opts.Kubeconfig, opts.Context)
	if err != nil {
		return fmt.Errorf("storing the results: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: local.Scheme})
	if err != nil {
		return fmt.Errorf("storing the results: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), incluster.StoreTimeout)
	defer cancel()
	stored, err := incluster.Store(ctx, c, ns, name, opts.RunID, string(run.Verdict), out)
	if err != nil {
		return err
	}
	fmt.Printf("results stored in ConfigMap %s/%s (%d parts)\n", ns, name, len(stored.Parts))
	if len(stored.Dropped) > 0 {
		fmt.Printf("logs left out to fit, listed in the stored index: %s\n", strings.Join(stored.Dropped, ", "))
	}
	return nil
}

func withSuiteVersion(e results.Environment) results.Environment {
	v := version.Get()
	e.SuiteVersion, e.SuiteCommit, e.Workload = v.Version, v.Commit, opts.Workload
	if opts.GPUAllocation != "extended-resource" {
		e.GPUAllocation = opts.GPUAllocation
	}
	if opts.Scheduler == "kubernetes" {
		e.Scheduler, e.SchedulerVersion = opts.Scheduler, e.KubernetesVersion
	}
	return e
}

// measured records measurements for the results.
func measured(ms ...results.Measurement) {
	mu.Lock()
	defer mu.Unlock()
	run.Measurements = append(run.Measurements, ms...)
}

// pushRun pushes the run, with the range of the baseline runs at
// baselinePath when one is named.
func pushRun(url, baselinePath string, r *results.Results) error {
	baseline, err := results.ReadBaseline(baselinePath)
	if err != nil {
		return err
	}
	return results.Push(context.Background(), url, r, baseline...)
}
