package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/internal/testbin"
	"github.com/gpulab/gpulab/testbeds/local"
	"github.com/gpulab/gpulab/testbeds/local/localtest"
)

// NightlyTestEnv turns TestShippedCronJobNights on: it runs the suite nine
// times on a local testbed, so `make test-nightly` runs it, not `make test`.
const NightlyTestEnv = "GPULAB_NIGHTLY_TEST"

// The planted slowdown of the third night: the operator, built with
// -tags gpulab_faults, waits plantedDelay before each pod create
// (operator/internal/faults.SlowPodCreate). The nights' gangs are few
// (--max-gpus=16: two latency clusters), so no start-up backlog hides the
// wait as it does at N=100 (docs/operations/nightly.md): it adds about
// 3 × plantedDelay to each cluster's create→pods created, far above the
// +30% the test asks of it.
const plantedDelay = "500ms"

// shippedNightly is the CronJob as `kubectl apply -k
// conformance/config/nightly` creates it, and its container's argv.
type shippedNightly struct {
	cronJob *batchv1.CronJob
	// argv is the image's ENTRYPOINT (conformance/Dockerfile) followed by
	// the container's args: the CronJob sets no command.
	argv []string
	env  []corev1.EnvVar
}

// renderShippedNightly reads the CronJob the kustomization applies. Its
// kustomization only lists resources (no patches, images, namespace or
// name transformers), so the rendering is cronjob.yaml as written; the
// test refuses a kustomization that could change it.
func renderShippedNightly(t *testing.T) shippedNightly {
	t.Helper()
	kustomization, err := os.ReadFile("../config/nightly/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(kustomization, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	for key := range k {
		if key != "apiVersion" && key != "kind" && key != "resources" {
			t.Fatalf("kustomization.yaml has %q, which can change the CronJob: render it here as kustomize does", key)
		}
	}
	if !slices.Contains(k["resources"].([]any), "cronjob.yaml") {
		t.Fatalf("kustomization.yaml does not apply cronjob.yaml: %v", k["resources"])
	}
	data, err := os.ReadFile("../config/nightly/cronjob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cj batchv1.CronJob
	if err := yaml.UnmarshalStrict(data, &cj); err != nil {
		t.Fatalf("cronjob.yaml: %v", err)
	}
	containers := cj.Spec.JobTemplate.Spec.Template.Spec.Containers
	if len(containers) != 1 || len(containers[0].Command) != 0 {
		t.Fatalf("want one container running the image's entrypoint, got %+v", containers)
	}
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	const entrypoint = `ENTRYPOINT ["/usr/local/bin/gpulab-conformance"]`
	if !strings.Contains(string(dockerfile), entrypoint) {
		t.Fatalf("conformance/Dockerfile lacks %s: the container's argv is no longer the suite's", entrypoint)
	}
	return shippedNightly{cronJob: &cj, argv: append([]string{"gpulab-conformance"}, containers[0].Args...), env: containers[0].Env}
}

// asProcess is the CronJob's argv as a process on this machine runs it.
// Only what a pod has and a process does not is replaced, each flag of
// the shipped args once: the results volume (an emptyDir at /results) by
// a directory of the night's own, and the Pushgateway's in-cluster Service
// name by a stand-in's address. The cluster is reached through KUBECONFIG
// (nightCommand) where the pod uses its in-cluster config. Nothing else
// changes: the runs, the scale, the footprint, the baseline ConfigMap, the
// gate and the requirements are the CronJob's own.
func asProcess(t *testing.T, argv []string, out, pushgateway string) []string {
	t.Helper()
	replace := map[string]string{"--out=": "--out=" + out, "--pushgateway-url=": "--pushgateway-url=" + pushgateway}
	got := slices.Clone(argv[1:])
	for prefix, with := range replace {
		n := 0
		for i, a := range got {
			// Only the nightly's own flags, before --.
			if a == "--" {
				break
			}
			if strings.HasPrefix(a, prefix) {
				got[i], n = with, n+1
			}
		}
		if n != 1 {
			t.Fatalf("the CronJob's args %q have %s %d times, want once", argv, prefix, n)
		}
	}
	return got
}

// pushgatewayStandIn accepts the nightly's pushes, as a Pushgateway does,
// and keeps each one's body.
type pushgatewayStandIn struct {
	mu     sync.Mutex
	pushes []string
}

func (p *pushgatewayStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || (r.Method != http.MethodPut && r.Method != http.MethodPost) || !strings.HasPrefix(r.URL.Path, "/metrics/job/") {
		http.Error(w, "not a push", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.pushes = append(p.pushes, string(body))
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (p *pushgatewayStandIn) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pushes
	p.pushes = nil
	return out
}

// nightResult is one night: its exit code, output and median.
type nightResult struct {
	code   int
	output string
	median *results.Results
	pushes []string
}

// TestShippedCronJobNights: the shipped CronJob's exact command, run three
// nights against the local testbed with its baseline in a ConfigMap. The
// first night records the baseline there and exits 0, saying so; an
// unchanged second night compares with it and exits 0; a third, whose
// operator waits before each pod create, exits 1 naming the regression,
// and leaves the baseline as the first night recorded it.
func TestShippedCronJobNights(t *testing.T) {
	if os.Getenv(NightlyTestEnv) != "1" {
		t.Skipf("runs the suite nine times on the local testbed: `make test-nightly` runs it (%s=1)", NightlyTestEnv)
	}
	// The testbed's client logs nothing worth reading here.
	ctrllog.SetLogger(logr.Discard())
	shipped := renderShippedNightly(t)
	o, err := parseNightly(shipped.argv[2:])
	if err != nil || shipped.argv[1] != "nightly" {
		t.Fatalf("the CronJob does not run nightly: %q: %v", shipped.argv, err)
	}
	ns, name, err := parseConfigMapSource(o.Baseline)
	if err != nil {
		t.Fatal(err)
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	// The suite as the image builds it; the operator with the planted
	// faults, unplanted on the first two nights.
	operator, err := testbin.Build(t.Context(), "nightly/gpulab-operator-faulty", "./operator/cmd/gpulab-operator", "build", "-tags", "gpulab_faults")
	if err != nil {
		t.Fatal(err)
	}
	suite, err := testbin.Build(t.Context(), "nightly/gpulab-conformance", "./conformance", "test", "-c")
	if err != nil {
		t.Fatal(err)
	}

	fleet, err := local.ParseFleet("dgx-h100=4")
	if err != nil {
		t.Fatal(err)
	}
	tb := localtest.Start(t, local.Options{Name: "gpulab-nightly", Fleet: fleet})
	c, err := tb.Client()
	if err != nil {
		t.Fatal(err)
	}
	// The CronJob's namespace, which `kubectl apply -k` creates from the
	// base (conformance/config). The runs use the testbed's admin
	// kubeconfig, not the CronJob's ServiceAccount.
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shipped.cronJob.Namespace}}); err != nil {
		t.Fatal(err)
	}
	gateway := &pushgatewayStandIn{}
	srv := httptest.NewServer(gateway)
	t.Cleanup(srv.Close)

	tmp := t.TempDir()
	night := func(t *testing.T, i int, env ...string) nightResult {
		t.Helper()
		op, err := profile.StartOperator(t.Context(), profile.OperatorOptions{Name: fmt.Sprintf("operator-night-%d", i),
			Binary: operator, Kubeconfig: tb.Kubeconfig(), LogDir: tmp, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := op.Stop(); err != nil {
				t.Errorf("stopping the operator: %v", err)
			}
		}()
		// Each night's Job has a fresh results volume.
		out := filepath.Join(tmp, fmt.Sprintf("night-%d", i), "results")
		args := asProcess(t, shipped.argv, out, srv.URL)
		cmd := exec.CommandContext(t.Context(), suite, args...)
		cmd.Dir = root
		cmd.Env = os.Environ()
		for _, e := range shipped.env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		// In the pod, client-go reads the in-cluster config; here the
		// testbed's kubeconfig (the last KUBECONFIG wins).
		cmd.Env = append(cmd.Env, "KUBECONFIG="+tb.Kubeconfig())
		var output bytes.Buffer
		cmd.Stdout, cmd.Stderr = &output, &output
		start := time.Now()
		err = cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("night %d: %v", i, err)
		}
		t.Logf("night %d: exit %d in %s", i, code, time.Since(start).Round(time.Second))
		r := nightResult{code: code, output: output.String(), pushes: gateway.take()}
		r.median, _ = results.Read(filepath.Join(out, "median", results.ResultsFile))
		return r
	}
	baseline := func(t *testing.T) *corev1.ConfigMap {
		t.Helper()
		var cm corev1.ConfigMap
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
			t.Fatalf("the baseline ConfigMap %s/%s: %v", ns, name, err)
		}
		return &cm
	}

	first := night(t, 1, "GPULAB_PLANTED_FAULT=")
	if first.code != NightlyPassed || !strings.Contains(first.output, "recorded this night's 3 runs there as the baseline") {
		t.Fatalf("first night: exit %d, want 0 and the baseline recorded:\n%s", first.code, lastLines(first.output, 120))
	}
	recorded := baseline(t)
	if recorded.Labels[BaselineSetLabel] != name || recorded.Data[runKey(o.Runs)] == "" {
		t.Fatalf("the baseline ConfigMap: labels %v, %d keys; want the set label and %d runs", recorded.Labels, len(recorded.Data), o.Runs)
	}
	if len(first.pushes) != 1 || !strings.Contains(first.pushes[0], "gpulab_conformance_measurement") {
		t.Errorf("first night: %d pushes, want the median's one", len(first.pushes))
	}

	second := night(t, 2, "GPULAB_PLANTED_FAULT=")
	if second.code != NightlyPassed || !strings.Contains(second.output, "nightly: nothing regressed (exit 0)") || strings.Contains(second.output, "recorded") {
		t.Fatalf("unchanged second night: exit %d, want 0 from a comparison:\n%s", second.code, lastLines(second.output, 120))
	}
	if len(second.pushes) != 1 || !strings.Contains(second.pushes[0], "gpulab_conformance_baseline") {
		t.Errorf("second night: %d pushes, want the median's one with the baseline's band", len(second.pushes))
	}

	third := night(t, 3, "GPULAB_PLANTED_FAULT=slow-pod-create", "GPULAB_PLANTED_DELAY="+plantedDelay)
	if third.code != NightlyFailed || !strings.Contains(third.output, "nightly: FAILED (exit 1)") {
		t.Fatalf("slowed third night: exit %d, want 1:\n%s", third.code, lastLines(third.output, 120))
	}
	var regressions []string
	for _, line := range strings.Split(third.output, "\n") {
		if strings.Contains(line, "REGRESSION") && o.Compare.Gate.MatchString(strings.Fields(line)[0]) {
			regressions = append(regressions, line)
		}
	}
	if len(regressions) == 0 {
		t.Fatalf("slowed third night: no gated measurement named as a REGRESSION:\n%s", lastLines(third.output, 120))
	}
	t.Logf("the third night's regressions:\n%s", strings.Join(regressions, "\n"))
	// The slowdown planted is at least the +30% the issue asks for, on
	// the operator's own phase, median against median.
	const key = "latency/create_to_pods_created"
	before, after := medianOf(t, second.median, key, o.Compare.Statistic), medianOf(t, third.median, key, o.Compare.Statistic)
	if after < 1.3*before {
		t.Errorf("%s %s: %.3fs unchanged, %.3fs slowed: the planted slowdown is under +30%%", key, o.Compare.Statistic, before, after)
	}
	t.Logf("%s %s: %.3fs unchanged, %.3fs slowed (%+.0f%%)", key, o.Compare.Statistic, before, after, 100*(after/before-1))
	// A failing night replaces nothing: the baseline is the first night's.
	if now := baseline(t); now.ResourceVersion != recorded.ResourceVersion {
		t.Errorf("the baseline ConfigMap changed after the first night (resourceVersion %s, then %s)", recorded.ResourceVersion, now.ResourceVersion)
	}
}

// medianOf is the night's median of measurement key, by the statistic the
// nightly compares.
func medianOf(t *testing.T, r *results.Results, key, statistic string) float64 {
	t.Helper()
	if r == nil {
		t.Fatalf("no median results")
	}
	for _, m := range r.Measurements {
		if m.Key() == key {
			return results.Statistics[statistic](m)
		}
	}
	t.Fatalf("the median has no %s", key)
	return 0
}

// What TestShippedCronJobNights runs differs from the CronJob's argv in
// the results folder and the Pushgateway only, and still parses; this
// part runs in `make test`.
func TestShippedCronJobAsAProcess(t *testing.T) {
	shipped := renderShippedNightly(t)
	got := asProcess(t, shipped.argv, "/tmp/night/results", "http://127.0.0.1:9091")
	want := shipped.argv[1:]
	if len(got) != len(want) {
		t.Fatalf("%q, want the length of %q", got, want)
	}
	var changed []string
	for i := range got {
		if got[i] != want[i] {
			changed = append(changed, want[i]+" -> "+got[i])
		}
	}
	if len(changed) != 2 {
		t.Errorf("changed %q, want --out and --pushgateway-url only", changed)
	}
	o, err := parseNightly(got[1:])
	if err != nil || got[0] != "nightly" {
		t.Fatalf("%q does not parse as nightly: %v", got, err)
	}
	if o.Out != "/tmp/night/results" || o.PushgatewayURL != "http://127.0.0.1:9091" || o.Runs != 3 || o.Compare.Gate == nil {
		t.Errorf("out %s, pushgateway %s, runs %d, gate %v", o.Out, o.PushgatewayURL, o.Runs, o.Compare.Gate)
	}
}
