package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/scheme"
	"github.com/gpulab/gpulab/internal/version"
)

// DefaultRunnerImage is the suite's image at this build's version, as the
// release workflow publishes it.
func DefaultRunnerImage() string {
	v := version.Get().Version
	if v == "" || v == "dev" {
		v = "latest"
	}
	return "ghcr.io/gpulab/gpulab-conformance:" + strings.TrimPrefix(v, "v")
}

// submitFlags are submit's own flags; every other one is a run flag.
type submitFlags struct {
	image, namespace, pullPolicy string
	follow, allowSystem          bool
	// waitTimeout is --wait-timeout; 0 until given (submitCommand then
	// derives it from the run's --timeout).
	waitTimeout time.Duration
}

// splitSubmitArgs takes submit's own flags (--runner-image,
// --runner-namespace, --runner-pull-policy, --runner-namespace-allow-system,
// --follow, --wait-timeout) out of args, in the --name=value or --name
// value forms (the booleans: --name or --name=true|false).
func splitSubmitArgs(args []string) (submitFlags, []string, error) {
	sf := submitFlags{image: DefaultRunnerImage(), namespace: incluster.DefaultNamespace, pullPolicy: string(corev1.PullIfNotPresent), follow: true}
	var wait string
	values := map[string]*string{"runner-image": &sf.image, "runner-namespace": &sf.namespace, "runner-pull-policy": &sf.pullPolicy, "wait-timeout": &wait}
	bools := map[string]*bool{"follow": &sf.follow, "runner-namespace-allow-system": &sf.allowSystem}
	var rest []string
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") {
			rest = append(rest, args[i])
			continue
		}
		if b, ok := bools[name]; ok {
			*b = !hasValue || value == "true"
			if hasValue && value != "true" && value != "false" {
				return sf, nil, fmt.Errorf("--%s=%q: want true or false", name, value)
			}
			continue
		}
		p, ok := values[name]
		if !ok {
			rest = append(rest, args[i])
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return sf, nil, fmt.Errorf("--%s needs a value", name)
			}
			i++
			value = args[i]
		}
		*p = value
	}
	switch corev1.PullPolicy(sf.pullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return sf, nil, fmt.Errorf("--runner-pull-policy=%q: want Always, IfNotPresent or Never", sf.pullPolicy)
	}
	if sf.image == "" || sf.namespace == "" {
		return sf, nil, fmt.Errorf("--runner-image and --runner-namespace may not be empty")
	}
	if msgs := validation.IsDNS1123Label(sf.namespace); len(msgs) > 0 {
		return sf, nil, fmt.Errorf("--runner-namespace=%q: %s", sf.namespace, strings.Join(msgs, "; "))
	}
	if wait != "" {
		d, err := time.ParseDuration(wait)
		if err != nil || d <= 0 {
			return sf, nil, fmt.Errorf("--wait-timeout=%q: want a positive duration such as 90m", wait)
		}
		sf.waitTimeout = d
	}
	return sf, rest, nil
}

// podArgs are the run flags the runner pod gets: all that were given but
// those that name the submitter's side (its kubeconfig and context) or that
// the runner sets itself, and those in rewrite given rewrite's value (a
// path in the pod for one on the submitter's disk). Each of these takes a
// value.
func podArgs(args []string, rewrite map[string]string) []string {
	drop := map[string]bool{"kubeconfig": true, "context": true, "profile": true, "out": true, "run-id": true, "results-configmap": true}
	var out []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if _, rewritten := rewrite[name]; strings.HasPrefix(args[i], "-") && (drop[name] || rewritten) {
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, args[i])
	}
	for _, name := range slices.Sorted(maps.Keys(rewrite)) {
		out = append(out, "--"+name+"="+rewrite[name])
	}
	return out
}

// maxBaseline is what the baseline ConfigMap carries, with room to spare
// under the API server's 1 MiB.
const maxBaseline = 900 << 10

// carry reads the files the run's flags name on the submitter's disk, for
// the runner pod to mount (incluster.Files), and the flags that then point at
// them there. --perfdata, an output folder, becomes the results' perfdata/,
// which retrieve brings back.
func carry(o *RunOptions) (incluster.Files, map[string]string, error) {
	var f incluster.Files
	rewrite := map[string]string{}
	for _, file := range []struct {
		flag, path, mounted string
		into                *[]byte
	}{
		{"prometheus-bearer-token-file", o.PrometheusBearerTokenFile, incluster.PrometheusTokenPath, &f.PrometheusToken},
		{"prometheus-ca-file", o.PrometheusCAFile, incluster.PrometheusCAPath, &f.PrometheusCA},
	} {
		if file.path == "" {
			continue
		}
		data, err := os.ReadFile(file.path)
		if err != nil {
			return f, nil, fmt.Errorf("--%s: %w", file.flag, err)
		}
		*file.into, rewrite[file.flag] = data, file.mounted
	}
	if o.PushBaseline != "" {
		baseline, mounted, err := carryBaseline(o.PushBaseline)
		if err != nil {
			return f, nil, err
		}
		f.Baseline, rewrite["push-baseline"] = baseline, mounted
	}
	if o.PerfData != "" {
		rewrite["perfdata"] = incluster.PerfDataDir
	}
	return f, rewrite, nil
}

// carryBaseline is --push-baseline's runs as the pod will see them under
// incluster.BaselineDir: a file as results.json, a folder's runs (those
// results.ReadRuns counts) as NNN/results.json; and the flag's value there.
func carryBaseline(path string) (map[string][]byte, string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, "", fmt.Errorf("--push-baseline: %w", err)
	}
	files := map[string][]byte{}
	mounted := incluster.BaselineDir
	if !info.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, "", fmt.Errorf("--push-baseline: %w", err)
		}
		files[results.ResultsFile] = data
		mounted = incluster.BaselineDir + "/" + results.ResultsFile
	} else {
		runs, _, err := results.ReadRuns(path)
		if err != nil {
			return nil, "", fmt.Errorf("--push-baseline: %w", err)
		}
		for i, r := range runs {
			data, err := os.ReadFile(r.Path)
			if err != nil {
				return nil, "", fmt.Errorf("--push-baseline: %w", err)
			}
			files[fmt.Sprintf("%03d/%s", i, results.ResultsFile)] = data
		}
	}
	size := 0
	for _, data := range files {
		size += len(data)
	}
	if size > maxBaseline {
		return nil, "", fmt.Errorf("--push-baseline=%s: %d KiB of runs, more than a ConfigMap carries into the runner pod (%d KiB): name fewer runs",
			path, size>>10, maxBaseline>>10)
	}
	return files, mounted, nil
}

const submitUsage = `usage: gpulab-conformance submit [--runner-image IMAGE] [--runner-namespace NS] [--runner-pull-policy POLICY] [--follow=false] [--wait-timeout D] [run flags]
  --runner-image         the gpulab-conformance image the runner Job runs (default ghcr.io/gpulab/gpulab-conformance:<this version>)
  --runner-namespace     the runner's namespace, created with the shipped RBAC where missing (default gpulab-conformance);
                         kube-system, kube-public, kube-node-lease and gpulab's operator's namespace are refused
  --runner-namespace-allow-system  use such a namespace anyway (the chart's runner lives in its release namespace)
  --runner-pull-policy   Always, IfNotPresent (default) or Never
  --follow               follow the run's log and exit with its exit code (default true); false returns once submitted
  --wait-timeout         how long to follow the run, from submission to verdict (default: --timeout, plus 10m for
                         the pod to start and the time it may take to clean up after a SIGTERM); a pod that has not
                         started within 10m (or this) is an error naming why
The run flags are run's (gpulab-conformance run -h): --profile is cluster, and --kubeconfig and --context
are the submitter's own; the runner pod talks to its cluster as the gpulab-conformance ServiceAccount.
--prometheus-bearer-token-file, --prometheus-ca-file and --push-baseline are read here and carried into the
pod (a Secret, a ConfigMap); --perfdata's files come back with retrieve, under perfdata/.
`

// submitCommand runs the suite in the cluster: the shipped RBAC where it is
// missing, then a Job running `run` with the given flags, whose log it
// follows. Its exit code is the run's, as `run` would have returned.
func submitCommand(args []string, stdout, stderr io.Writer) int {
	sf, rest, err := splitSubmitArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance submit: %v\n", err)
		return results.ExitUsage
	}
	o, err := ParseRun(append([]string{"--profile=cluster"}, rest...), stderr)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, submitUsage)
		return results.ExitPassed
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance submit: %v\n(gpulab-conformance -h lists the run flags)\n", err)
		return results.ExitUsage
	}
	if o.Profile != "cluster" {
		fmt.Fprintf(stderr, "gpulab-conformance submit: --profile=%s: in a cluster the suite runs --profile=cluster\n", o.Profile)
		return results.ExitUsage
	}
	files, rewrite, err := carry(o)
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance submit: %v\n", err)
		return results.ExitUsage
	}
	c, cs, where, code := clients(o.Kubeconfig, o.Context, stderr)
	if c == nil {
		return code
	}
	// A gpucluster of the latency feature is a head and two workers: the
	// run's cleanup waits for that many pods at most.
	grace := incluster.TerminationGrace(3 * o.Scale)
	wait := sf.waitTimeout
	if wait == 0 {
		wait = incluster.StartUpAllowance + o.Timeout + grace
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, wait, fmt.Errorf("--wait-timeout=%s passed; the run goes on in the cluster "+
		"(gpulab-conformance status --run-id %s)", wait, o.RunID))
	defer cancel()
	ro := incluster.Options{Namespace: sf.namespace, AllowSystemNamespace: sf.allowSystem, Image: sf.image, PullPolicy: corev1.PullPolicy(sf.pullPolicy),
		RunID: o.RunID, Args: podArgs(rest, rewrite), Files: files, TerminationGrace: grace}
	created, err := incluster.Submit(ctx, c, ro)
	for _, s := range created {
		fmt.Fprintf(stdout, "created %s\n", s)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance submit: %v\n", err)
		return results.ExitFailed
	}
	fmt.Fprintf(stdout, "run %s submitted to %s: Job %s/%s, image %s\n"+
		"  gpulab-conformance status --run-id %[1]s\n  gpulab-conformance retrieve --run-id %[1]s --to DIR\n  gpulab-conformance cleanup --run-id %[1]s\n",
		o.RunID, where, sf.namespace, incluster.JobName(o.RunID), sf.image)
	if !sf.follow {
		return results.ExitPassed
	}
	st, err := incluster.Follow(ctx, c, cs, sf.namespace, o.RunID, stdout, incluster.FollowOptions{StartTimeout: min(incluster.StartUpAllowance, wait)})
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance submit: %v\n", err)
		return results.ExitFailed
	}
	return finished(st, stdout, stderr)
}

// finished reports a run's end and returns its exit code.
func finished(st incluster.State, stdout, stderr io.Writer) int {
	if st.Phase != "Finished" {
		fmt.Fprintf(stderr, "gpulab-conformance: the runner pod %s has not finished (%s %s)\n", st.Pod, st.Phase, st.Reason)
		return results.ExitFailed
	}
	fmt.Fprintf(stdout, "run finished: %s, exit %d\n", orNone(st.Verdict), st.ExitCode)
	if st.Verdict == "" {
		fmt.Fprintln(stderr, "gpulab-conformance: the run stored no results (see its log above)")
		return results.ExitFailed
	}
	return int(st.ExitCode)
}

func orNone(s string) string {
	if s == "" {
		return "no verdict"
	}
	return s
}

// statusCommand prints a submitted run's phase and verdict.
func statusCommand(args []string, stdout, stderr io.Writer) int {
	const usage = "gpulab-conformance status --run-id ID [--runner-namespace NS] [--kubeconfig FILE] [--context NAME]"
	fs, runID, ns, kubeconfig, kubeContext := runnerCommandFlags("status", usage, stderr)
	if code, ok := parseRunnerCommand(fs, args, runID, usage, stderr); !ok {
		return code
	}
	c, _, _, code := clients(*kubeconfig, *kubeContext, stderr)
	if c == nil {
		return code
	}
	st, err := incluster.Status(context.Background(), c, *ns, *runID)
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance status: %v\n", err)
		return results.ExitFailed
	}
	fmt.Fprintf(stdout, "run %s: %s", *runID, st.Phase)
	if st.Phase == "Finished" {
		fmt.Fprintf(stdout, ", exit %d", st.ExitCode)
	}
	fmt.Fprintf(stdout, ", verdict %s, pod %s", orNone(st.Verdict), orNone(st.Pod))
	if st.Reason != "" {
		fmt.Fprintf(stdout, " (%s)", st.Reason)
	}
	fmt.Fprintln(stdout)
	return results.ExitPassed
}

// retrieveCommand unpacks a run's stored results into a folder.
func retrieveCommand(args []string, stdout, stderr io.Writer) int {
	const usage = "gpulab-conformance retrieve --run-id ID --to DIR [--force] [--runner-namespace NS] [--kubeconfig FILE] [--context NAME]"
	fs, runID, ns, kubeconfig, kubeContext := runnerCommandFlags("retrieve", usage, stderr)
	to := fs.String("to", "", "folder to write results.json, junit.xml, report.md, report.html, PRODUCT.yaml, logs/ and perfdata/ into")
	force := fs.Bool("force", false, "replace files already in --to (default: refuse, writing nothing)")
	if code, ok := parseRunnerCommand(fs, args, runID, usage, stderr); !ok {
		return code
	}
	if *to == "" {
		fmt.Fprintf(stderr, "usage: %s\n", usage)
		return results.ExitUsage
	}
	c, _, _, code := clients(*kubeconfig, *kubeContext, stderr)
	if c == nil {
		return code
	}
	got, err := incluster.Retrieve(context.Background(), c, *ns, *runID, *to, incluster.RetrieveOptions{Force: *force})
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance retrieve: %v\n", err)
		return results.ExitFailed
	}
	fmt.Fprintf(stdout, "run %s: %d files in %s\n", *runID, len(got.Files), *to)
	if len(got.Dropped) > 0 {
		fmt.Fprintf(stdout, "the run left out these logs to fit its ConfigMaps: %s\n", strings.Join(got.Dropped, ", "))
	}
	return results.ExitPassed
}

func runnerCommandFlags(name, usage string, stderr io.Writer) (fs *flag.FlagSet, runID, ns, kubeconfig, kubeContext *string) {
	fs = newCommandFlags(name, stderr, usage)
	runID = fs.String("run-id", "", "the submitted run (submit prints it)")
	ns = fs.String("runner-namespace", incluster.DefaultNamespace, "the runner's namespace, as given to submit")
	kubeconfig = fs.String("kubeconfig", "", "kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
	kubeContext = fs.String("context", "", "kubeconfig context (default its current context)")
	return fs, runID, ns, kubeconfig, kubeContext
}

func parseRunnerCommand(fs *flag.FlagSet, args []string, runID *string, usage string, stderr io.Writer) (int, bool) {
	if code, ok := parseCommandFlags(fs, args); !ok {
		return code, false
	}
	if *runID == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "usage: %s\n", usage)
		return results.ExitUsage, false
	}
	return 0, true
}

// clients are a controller-runtime client and a clientset (for logs) from
// a kubeconfig; nil and the exit code when it cannot be read.
func clients(kubeconfig, kubeContext string, stderr io.Writer) (client.Client, kubernetes.Interface, string, int) {
	cfg, name, err := profile.LoadConfig(kubeconfig, kubeContext)
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance: %v\n", err)
		return nil, nil, "", results.ExitUsage
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance: %v\n", err)
		return nil, nil, "", results.ExitFailed
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gpulab-conformance: %v\n", err)
		return nil, nil, "", results.ExitFailed
	}
	return c, cs, fmt.Sprintf("%s (%s)", name, cfg.Host), 0
}
