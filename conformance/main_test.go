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
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
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

var (
	testenv env.Environment
	cluster *profile.Environment

	mu  sync.Mutex
	run = &results.Results{SchemaVersion: results.SchemaVersion}
	// notes collects failure messages per feature for the results.
	notes = map[string][]string{}
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
		os.Exit(2)
	}
	if *scaleFlag < 1 {
		fmt.Fprintln(os.Stderr, "--scale must be at least 1")
		os.Exit(2)
	}
	// A zero or negative window would pass the gang checks without
	// watching anything, and a zero timeout fail every wait at once.
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"--wait-window", *waitWindowFlag}, {"--ready-timeout", *readyFlag}} {
		if d.value <= 0 {
			fmt.Fprintf(os.Stderr, "%s must be positive, got %s\n", d.name, d.value)
			os.Exit(2)
		}
	}
	if *profileFlag == "cluster" && cfg.KubeconfigFile() == "" {
		fmt.Fprintln(os.Stderr, "--profile=cluster needs --kubeconfig")
		os.Exit(2)
	}
	if testing.Short() {
		fmt.Println("conformance: skipped with -short (it brings up a cluster)")
		os.Exit(0)
	}
	out, err := filepath.Abs(*outFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testenv = env.NewWithConfig(cfg)
	testenv.Setup(func(ctx context.Context, c *envconf.Config) (context.Context, error) {
		run.StartTime = time.Now()
		var err error
		cluster, err = profile.Setup(ctx, profile.Options{
			Profile: *profileFlag, Kubeconfig: c.KubeconfigFile(), Scale: *scaleFlag, OutDir: filepath.Join(out, "logs"),
			OperatorBinary: *operatorFlag, Keep: *keepFlag, Log: os.Stdout, TestbedName: *testbedFlag,
		})
		if err != nil {
			return ctx, fmt.Errorf("profile %s: %w", *profileFlag, err)
		}
		c.WithClient(nil)
		run.Environment = cluster.Describe(ctx, *scaleFlag)
		return ctx, nil
	})
	testenv.AfterEachFeature(func(ctx context.Context, _ *envconf.Config, t *testing.T, f features.Feature) (context.Context, error) {
		mu.Lock()
		defer mu.Unlock()
		labels := map[string]string{}
		for k, v := range f.Labels() {
			labels[k] = strings.Join(v, ",")
		}
		run.Features = append(run.Features, results.Feature{
			Name: f.Name(), Labels: labels, Passed: !t.Failed(), Skipped: t.Skipped(),
			Messages: notes[f.Name()], Seconds: time.Since(featureStart(f.Name())).Seconds(),
		})
		return ctx, nil
	})
	testenv.BeforeEachFeature(func(ctx context.Context, _ *envconf.Config, _ *testing.T, f features.Feature) (context.Context, error) {
		markFeatureStart(f.Name())
		return ctx, nil
	})
	testenv.Finish(func(ctx context.Context, _ *envconf.Config) (context.Context, error) {
		run.EndTime = time.Now()
		if err := run.Write(out); err != nil {
			return ctx, err
		}
		fmt.Printf("\n%s\nresults: %s\n", run.Markdown(), out)
		if *pushFlag != "" {
			if err := results.Push(ctx, *pushFlag, run); err != nil {
				return ctx, err
			}
		}
		if cluster == nil {
			return ctx, nil
		}
		return ctx, cluster.Teardown(ctx)
	})
	os.Exit(testenv.Run(m))
}

var (
	startsMu sync.Mutex
	starts   = map[string]time.Time{}
)

func markFeatureStart(name string) {
	startsMu.Lock()
	defer startsMu.Unlock()
	starts[name] = time.Now()
}

func featureStart(name string) time.Time {
	startsMu.Lock()
	defer startsMu.Unlock()
	return starts[name]
}

// failf records a failure message for the feature's results and fails t.
func failf(t *testing.T, feature, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	mu.Lock()
	notes[feature] = append(notes[feature], msg)
	mu.Unlock()
	t.Error(msg)
}

// fatalf is failf then stop the assessment.
func fatalf(t *testing.T, feature, format string, args ...any) {
	t.Helper()
	failf(t, feature, format, args...)
	t.FailNow()
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
	for _, f := range c.Features {
		if !f.Passed && !f.Skipped {
			fmt.Printf("feature %s failed: %s\n", f.Name, strings.Join(f.Messages, "; "))
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
