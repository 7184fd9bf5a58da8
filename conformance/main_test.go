package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/e2e-framework/pkg/env"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// Flags beyond e2e-framework's own (--kubeconfig, --labels, --skip-labels,
// --feature, --fail-fast, --parallel).
var (
	profileFlag    = flag.String("profile", "local", "local (creates the local testbed), kind (creates a kind cluster; needs Docker) or cluster (an existing cluster, --kubeconfig)")
	outFlag        = flag.String("out", "_artifacts/conformance", "directory for results.json, junit.xml, report.md and logs")
	scaleFlag      = flag.Int("scale", 100, "latency clusters (1 head + 2 workers x 4 GPUs each); sizes the local fleet")
	keepFlag       = flag.Bool("keep", false, "leave the local testbed running afterwards")
	operatorFlag   = flag.String("operator-binary", "", "gpulab-operator binary for the local profile (default: build it)")
	waitWindowFlag = flag.Duration("wait-window", 10*time.Second, "how long a gang that cannot fit is watched for bound pods")
	readyFlag      = flag.Duration("ready-timeout", 2*time.Minute, "how long a gang that fits may take to be Ready")
	testbedFlag    = flag.String("testbed-name", "gpulab-conformance", "name of the local testbed the local profile creates")
	pushFlag       = flag.String("pushgateway-url", "", "push the run's verdicts and measurements to this Prometheus Pushgateway")
)

var fleetFlag = flag.String("fleet", "", "local profile: the fake GPU nodes as profile=count,... (as TESTBED_NODES, e.g. dgx-h100=1); default --scale+--scale/4+3 dgx-h100 nodes")

var (
	testenv env.Environment
	cluster *profile.Environment

	// mu guards run and the recording in plan_test.go.
	mu  sync.Mutex
	run = &results.Results{SchemaVersion: results.SchemaVersion}
	// setupErr and teardownErr are what the Setup and Finish steps could
	// not do; e2e-framework only logs them.
	setupErr, teardownErr error
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "compare" {
		os.Exit(compareMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "median" {
		os.Exit(medianMain(os.Args[2:]))
	}
	cfg, err := envconf.NewFromFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(results.ExitUsage)
	}
	if *scaleFlag < 1 {
		fmt.Fprintln(os.Stderr, "--scale must be at least 1")
		os.Exit(results.ExitUsage)
	}
	// A zero or negative window would pass the gang checks without
	// watching anything, and a zero timeout fail every wait at once.
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"--wait-window", *waitWindowFlag}, {"--ready-timeout", *readyFlag}} {
		if d.value <= 0 {
			fmt.Fprintf(os.Stderr, "%s must be positive, got %s\n", d.name, d.value)
			os.Exit(results.ExitUsage)
		}
	}
	if *profileFlag == "cluster" && cfg.KubeconfigFile() == "" {
		fmt.Fprintln(os.Stderr, "--profile=cluster needs --kubeconfig")
		os.Exit(results.ExitUsage)
	}
	var fleet local.Fleet
	if *fleetFlag != "" {
		if *profileFlag != "local" {
			fmt.Fprintf(os.Stderr, "--fleet sizes the local testbed; --profile=%s has its own nodes\n", *profileFlag)
			os.Exit(results.ExitUsage)
		}
		if fleet, err = local.ParseFleet(*fleetFlag); err != nil {
			fmt.Fprintf(os.Stderr, "--fleet: %v\n", err)
			os.Exit(results.ExitUsage)
		}
	}
	if testing.Short() {
		fmt.Println("conformance: skipped with -short (it brings up a cluster)")
		os.Exit(0)
	}
	out, err := filepath.Abs(*outFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(results.ExitUsage)
	}
	run.Environment = results.Environment{Profile: *profileFlag, Scale: *scaleFlag}
	testenv = env.NewWithConfig(cfg)
	testenv.Setup(func(ctx context.Context, c *envconf.Config) (context.Context, error) {
		run.StartTime = time.Now()
		var err error
		cluster, err = profile.Setup(ctx, profile.Options{
			Profile: *profileFlag, Kubeconfig: c.KubeconfigFile(), Scale: *scaleFlag, Fleet: fleet, OutDir: filepath.Join(out, "logs"),
			OperatorBinary: *operatorFlag, Keep: *keepFlag, Log: os.Stdout, TestbedName: *testbedFlag,
		})
		if err != nil {
			setupErr = fmt.Errorf("profile %s: %w", *profileFlag, err)
			return ctx, setupErr
		}
		c.WithClient(nil)
		run.Environment = cluster.Describe(ctx, *scaleFlag)
		return ctx, nil
	})
	testenv.BeforeEachFeature(beforeFeature)
	testenv.AfterEachFeature(afterFeature)
	testenv.Finish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		run.EndTime = time.Now()
		if cluster != nil {
			teardownErr = cluster.Teardown(ctx)
		}
		return ctx, teardownErr
	})
	code := testenv.Run(m)
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
	run.Finalize()
	var errs []error
	if err := run.Write(out); err != nil {
		errs = append(errs, err)
	}
	fmt.Printf("\n%s\nresults: %s\n", run.Markdown(), out)
	if *pushFlag != "" {
		if err := results.Push(context.Background(), *pushFlag, run); err != nil {
			errs = append(errs, err)
		}
	}
	if teardownErr != nil {
		errs = append(errs, fmt.Errorf("tearing down the %s profile: %w", *profileFlag, teardownErr))
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

// measured records measurements for the results.
func measured(ms ...results.Measurement) {
	mu.Lock()
	defer mu.Unlock()
	run.Measurements = append(run.Measurements, ms...)
}

func compareMain(args []string) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	baseline := fs.String("baseline", "", "baseline results.json")
	current := fs.String("current", "", "current results.json")
	maxReg := fs.String("max-regression", "10%", "allowed p99 growth")
	noiseS := fs.Float64("noise-seconds", 0.05, "absolute growth in seconds always tolerated")
	noiseN := fs.Float64("noise-count", 1, "absolute growth in counts always tolerated")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var pct float64
	if _, err := fmt.Sscanf(strings.TrimSuffix(*maxReg, "%"), "%g", &pct); err != nil || *baseline == "" || *current == "" {
		fmt.Fprintln(os.Stderr, "usage: gpulab-conformance compare --baseline A.json --current B.json [--max-regression 10%]")
		return 2
	}
	b, err := results.Read(*baseline)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := results.Read(*current)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	regressed := results.PrintComparison(os.Stdout, results.Compare(b, c, results.CompareOptions{MaxRegression: pct / 100, NoiseSeconds: *noiseS, NoiseCount: *noiseN}))
	// A failed feature fails the comparison; a partial one is named (the
	// nightly job decides, from each run's exit code, whether it may pass).
	for _, f := range c.Features {
		switch results.FeatureStatus(f.Assessments) {
		case results.StatusPassed:
		case results.StatusPartial:
			fmt.Printf("feature %s partial: %s\n", f.Name, strings.Join(f.Messages(), "; "))
		default:
			fmt.Printf("feature %s failed: %s\n", f.Name, strings.Join(f.Messages(), "; "))
			regressed = true
		}
	}
	if regressed {
		return 1
	}
	return 0
}

// medianMain merges repeated runs: median --out DIR run1.json run2.json ...
func medianMain(args []string) int {
	fs := flag.NewFlagSet("median", flag.ContinueOnError)
	out := fs.String("out", "", "directory for the merged results.json, junit.xml and report.md")
	push := fs.String("pushgateway-url", "", "also push the merged results here")
	if err := fs.Parse(args); err != nil || *out == "" || fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: gpulab-conformance median --out DIR run1/results.json run2/results.json ...")
		return 2
	}
	var runs []*results.Results
	for _, path := range fs.Args() {
		r, err := results.Read(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		runs = append(runs, r)
	}
	merged := results.Median(runs)
	if err := merged.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if *push != "" {
		if err := results.Push(context.Background(), *push, merged); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Print(merged.Markdown())
	return 0
}
