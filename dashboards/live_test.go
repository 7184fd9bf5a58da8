package dashboards_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/dashboards"
	"github.com/gpulab/gpulab/internal/testbin"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/local"
)

// The fleet has two products so "by product" panels have something to
// split; the suite's latency clusters (2 x 2 workers x 4 GPUs) fit the H100s.
const liveFleet = "dgx-h100=3,dgx-a100=1"

// One Prometheus holds two clusters, as a multi-cluster one does: the
// testbed (gpulab-agent) and a cluster whose GPUs DCGM exporter reports
// (a recorded exposition, testdata/dcgm-exporter.prom).
const (
	liveCluster = "gpulab-dashboards"
	dcgmCluster = "dcgm-lab"
)

// TestQueriesOnTestbed proves every dashboard query has data: Prometheus and
// a Pushgateway (built into the cache by make testbed-binaries) run on loopback with the shipped local
// scrape config and rules, scraping the local testbed's Volcano scheduler
// and agent and the operator binary, while the conformance
// suite's latency feature runs against the testbed and pushes its results.
// The lab also holds what a real one does: a steady CPU-only GPUCluster, a
// GPUCluster that can never fit, and a GPU with an injected XID. Then each
// variable query must return values, and each panel target (variables
// resolved to All) must parse and return a series with a value.
func TestQueriesOnTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the local testbed, Prometheus and a Pushgateway; skipped with -short")
	}
	ctx := t.Context()
	// Built by `make testbed-binaries`, like the testbed's own binaries.
	monitoring, err := binaries.LookupMonitoring(ctx, binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	start := time.Now()

	// The operator and the suite build (one after the other: 2 cores) while
	// the testbed comes up.
	var operator, suite string
	built := make(chan error, 1)
	go func() {
		var err error
		if operator, err = testbin.Build(ctx, "dashboards/gpulab-operator", "./operator/cmd/gpulab-operator", "build"); err == nil {
			suite, err = testbin.Build(ctx, "dashboards/gpulab-conformance", "./conformance", "test", "-c")
		}
		built <- err
	}()

	fleet, err := local.ParseFleet(liveFleet)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := local.New(local.Options{Name: "gpulab-dashboards", Fleet: fleet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Down(context.Background()); err != nil {
			t.Errorf("testbed down: %v", err)
		}
	})
	if err := tb.Up(ctx); err != nil {
		t.Fatalf("testbed up: %v", err)
	}
	t.Logf("testbed up after %s", time.Since(start).Round(time.Second))
	st, err := tb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tb.Client()
	if err != nil {
		t.Fatal(err)
	}

	if err := <-built; err != nil {
		t.Fatal(err)
	}
	// The operator binary as a user runs it out of cluster, with leader
	// election on so the leader metric exists.
	operatorAddr := freeAddr(t)
	startProcess(t, tmp, "operator", operator, "--kubeconfig="+tb.Kubeconfig(),
		"--metrics-bind-address="+operatorAddr, "--metrics-secure=false", "--health-probe-bind-address=0",
		"--leader-elect", "--leader-election-namespace=default")
	pushAddr := freeAddr(t)
	startProcess(t, tmp, "pushgateway", monitoring.Pushgateway, "--web.listen-address="+pushAddr)

	// The shipped config and rules, with this run's targets.
	promDir := filepath.Join(tmp, "prometheus")
	copyTree(t, "prometheus", promDir)
	targets := dashboards.LocalTargets{
		Operator: operatorAddr, Pushgateway: pushAddr,
		Agent:            net.JoinHostPort("127.0.0.1", strconv.Itoa(st.Ports.AgentMetrics)),
		VolcanoScheduler: net.JoinHostPort("127.0.0.1", strconv.Itoa(st.Ports.SchedulerMetrics)),
		Cluster:          liveCluster,
	}
	if local.ControllerManagerMetrics(tb.Versions().Volcano) {
		targets.VolcanoControllerManager = net.JoinHostPort("127.0.0.1", strconv.Itoa(st.Ports.ControllerManagerMetrics))
	}
	if err := targets.Write(filepath.Join(promDir, "local", "targets")); err != nil {
		t.Fatal(err)
	}
	dcgmAddr := serveDCGMExporter(t)
	addScrapeJob(t, filepath.Join(promDir, "local", "prometheus.yml"), "dcgm-exporter", dcgmAddr, dcgmCluster)
	prom := &promAPI{base: "http://" + freeAddr(t)}
	startProcess(t, tmp, "prometheus", monitoring.Prometheus,
		"--config.file="+filepath.Join(promDir, "local", "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(tmp, "tsdb"),
		"--web.listen-address="+strings.TrimPrefix(prom.base, "http://"))
	poll(t, 2*time.Minute, "every scrape target up", func() (bool, string) {
		var res struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := prom.get(ctx, "/api/v1/targets", nil, &res); err != nil {
			return false, err.Error()
		}
		up := map[string]string{}
		for _, tg := range res.ActiveTargets {
			up[tg.Labels["job"]] = tg.Health + " " + tg.LastError
		}
		for _, job := range []string{"gpulab-operator", "gpulab-agent", "volcano-scheduler", "pushgateway", "dcgm-exporter"} {
			if strings.TrimSpace(up[job]) != "up" {
				return false, fmt.Sprintf("targets %v", up)
			}
		}
		return true, ""
	})

	// A lab's steady state: one cluster that fits, one that never can, one sick GPU.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dashboards"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, gpuCluster(ns.Name, "steady", 1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, gpuCluster(ns.Name, "too-big", 4, 8)); err != nil {
		t.Fatal(err)
	}
	// A GPUJob that runs to Succeeded (kwok finishes its submitter).
	job := &gpulabv1alpha1.GPUJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "smoke"},
		Spec: gpulabv1alpha1.GPUJobSpec{
			ClusterTemplate: &gpuCluster(ns.Name, "smoke", 1, 0).Spec,
			Submitter: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "submit", Image: "registry.k8s.io/pause:3.10"}}}},
		},
	}
	if err := c.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	injectXID(t, c, "dgx-a100-0", "7:79")
	// The job finishes, and its cluster is deleted, before the run, so the
	// run's count of the namespace's clusters is not raced by the job.
	poll(t, 2*time.Minute, "GPUJob smoke Succeeded and its cluster deleted", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		var cl gpulabv1alpha1.GPUClusterList
		if err := c.List(ctx, &cl, client.InNamespace(ns.Name)); err != nil {
			return false, err.Error()
		}
		return job.Status.Phase == gpulabv1alpha1.JobSucceeded && len(cl.Items) == 2,
			fmt.Sprintf("job %s, %d clusters", job.Status.Phase, len(cl.Items))
	})
	// controller-runtime creates a controller's reconcile-time histogram at
	// its first reconcile, so a series is born holding every reconcile so
	// far and rate() sees only later ones. The run's reconciles must come
	// after a scrape that already holds the series, or the latency panel
	// can have nothing to show however long it is polled.
	poll(t, time.Minute, "the operator's reconcile-time series scraped", func() (bool, string) {
		expr := fmt.Sprintf(`controller_runtime_reconcile_time_seconds_count{controller="gpucluster", instance=%q}`, operatorAddr)
		n, err := prom.values(ctx, expr, true, start, hasData.keep)
		if err != nil {
			return false, err.Error()
		}
		return n > 0, fmt.Sprintf("%d series", n)
	})

	runSuite(ctx, t, c, suite, tb.Kubeconfig(), ns.Name, "http://"+pushAddr, prom.base, filepath.Join(tmp, "conformance"))
	t.Logf("conformance run done after %s", time.Since(start).Round(time.Second))

	checkChecker(ctx, t, prom, start)
	checkDashboards(ctx, t, prom, start, dcgmAddr)
	checkNodeCount(ctx, t, prom, start, fleet)
	checkRulesLive(ctx, t, prom)
}

// checkChecker proves the data checks are not vacuous: an unknown metric
// has no data, a malformed query is an error, and a live series fails the
// no-data check.
func checkChecker(ctx context.Context, t *testing.T, prom *promAPI, start time.Time) {
	if n, err := prom.values(ctx, `gpulab_no_such_metric`, false, start, hasData.keep); err != nil || n != 0 {
		t.Errorf("an unknown metric gave %d series, %v; want 0, nil", n, err)
	}
	if _, err := prom.values(ctx, `sum(rate(gpulab_gpu_healthy[1m])`, false, start, hasData.keep); err == nil {
		t.Error("a malformed query was accepted")
	}
	if n, err := prom.values(ctx, `up`, false, start, hasNoData.keep); err != nil || hasNoData.ok(n) {
		t.Errorf("up passed the no-data check (%d series, %v)", n, err)
	}
}

// checkNodeCount checks gpulab_nodes counts what the operator's node watch
// saw, not only the zeros every class starts at: every node of the fleet,
// none of them added by an autoscaler.
func checkNodeCount(ctx context.Context, t *testing.T, prom *promAPI, start time.Time, fleet local.Fleet) {
	want := 0
	for _, e := range fleet {
		want += e.Count
	}
	expr := fmt.Sprintf(`sum(max by (gpu, autoscaled) (gpulab_nodes{cluster=%q, gpu="true", autoscaled="false"})) == %d`, liveCluster, want)
	poll(t, time.Minute, fmt.Sprintf("gpulab_nodes to count the fleet's %d GPU nodes", want), func() (bool, string) {
		n, err := prom.values(ctx, expr, true, start, hasData.keep)
		if err != nil {
			return false, err.Error()
		}
		return n > 0, fmt.Sprintf("no series for %s", expr)
	})
}

// checkRulesLive checks the shipped rules evaluate without error on real
// series, and that the alerts for the XID-sick GPU (with its labels) and the
// cluster that can never fit go pending or firing.
func checkRulesLive(ctx context.Context, t *testing.T, prom *promAPI) {
	poll(t, time.Minute, "every rule evaluated without error", func() (bool, string) {
		var res struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := prom.get(ctx, "/api/v1/rules", nil, &res); err != nil {
			return false, err.Error()
		}
		var bad []string
		n := 0
		for _, g := range res.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					bad = append(bad, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		return n > 0 && len(bad) == 0, fmt.Sprintf("%d rules, not ok: %v", n, bad)
	})
	// The operator starts each reason of
	// gpulab_unschedulable_decisions_total at 0, so increase() sees the
	// refusal of the cluster that can never fit.
	want := map[string]map[string]string{
		"GPULabGPUUnhealthy":          {"hostname": "dgx-a100-0", "gpu": "7", "job": "gpulab-agent"},
		"GPULabUnschedulableClusters": {},
	}
	poll(t, 2*time.Minute, "an alert for the sick GPU", func() (bool, string) {
		var res struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		if err := prom.get(ctx, "/api/v1/alerts", nil, &res); err != nil {
			return false, err.Error()
		}
		var missing []string
		for name, labels := range want {
			found := false
			for _, a := range res.Alerts {
				match := a.Labels["alertname"] == name
				for k, v := range labels {
					match = match && a.Labels[k] == v
				}
				found = found || match
			}
			if !found {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, fmt.Sprintf("missing %v among %d alerts", missing, len(res.Alerts))
	})
}

// checkDashboards resolves each dashboard's variables and runs every target
// over [start, now], polling until Prometheus has scraped what it needs:
// with every variable at All (gpulab-agent the GPU-fleet source), every
// target has data; with the cluster variable set to a cluster that does not
// exist, none has a non-zero value (each query filters on cluster). The
// GPU-fleet dashboard then runs again with DCGM exporter as its source and
// the DCGM page's cluster: every target has data from the recorded
// exposition at dcgmAddr alone.
func checkDashboards(ctx context.Context, t *testing.T, prom *promAPI, start time.Time, dcgmAddr string) {
	for path, d := range loadDashboards(t) {
		t.Run(d.UID, func(t *testing.T) {
			vals := resolveVariables(ctx, t, prom, path, d, nil, start)
			if d.UID == "gpulab-gpu-fleet" && slices.Contains(vals["instance"], dcgmAddr) {
				t.Errorf("with source gpulab-agent, $instance = %v lists DCGM exporter's %s", vals["instance"], dcgmAddr)
			}
			checkTargets(ctx, t, prom, d, vals, start, hasData)
			elsewhere := maps.Clone(vals)
			elsewhere["cluster"] = []string{"no-such-cluster"}
			checkTargets(ctx, t, prom, d, elsewhere, start, hasNoData)
			if d.UID != "gpulab-gpu-fleet" {
				return
			}
			// The DCGM page's cluster only: gpulab's agent may serve DCGM
			// exporter's names too, and its series must not stand in.
			t.Run("source=DCGM", func(t *testing.T) {
				vals := resolveVariables(ctx, t, prom, path, d, map[string][]string{"source": {dashboards.SourceDCGM.Value}, "cluster": {dcgmCluster}}, start)
				if !slices.Equal(vals["instance"], []string{dcgmAddr}) || !slices.Equal(vals["hostname"], []string{"dgx-h100-dcgm-0"}) ||
					!slices.Equal(vals["gpu"], []string{"0", "1", "2", "3"}) {
					t.Errorf("with source DCGM exporter and cluster %s, the variables are not the DCGM page's target, node and GPUs: %v", dcgmCluster, vals)
				}
				checkTargets(ctx, t, prom, d, vals, start, hasData)
			})
		})
	}
}

// resolveVariables gives each variable its values: set's where given, a
// custom variable's current value, a query variable's results (polled until
// there are some), in the dashboard's order, each resolved with the ones
// before it.
func resolveVariables(ctx context.Context, t *testing.T, prom *promAPI, path string, d dashboard, set map[string][]string, start time.Time) map[string][]string {
	t.Helper()
	vals := map[string][]string{}
	for _, v := range d.Templating.List {
		switch {
		case set[v.Name] != nil:
			vals[v.Name] = set[v.Name]
		case v.Type == "custom":
			vals[v.Name] = []string{fmt.Sprint(v.Current.Value)}
		case v.Type == "query":
			poll(t, time.Minute, fmt.Sprintf("values of variable %s", v.Name), func() (bool, string) {
				got, err := prom.variableValues(ctx, substitute(v.expr(), vals, start), v.Regex, start)
				vals[v.Name] = got
				if err != nil {
					return false, err.Error()
				}
				return len(got) > 0, "no values"
			})
		}
		t.Logf("%s: $%s = %v", path, v.Name, vals[v.Name])
	}
	return vals
}

// A check of one target's result: the series with a value, and whether
// that passes.
type resultCheck struct {
	keep func(float64) bool
	ok   func(n int) bool
	want string
	// poll waits for the result (data arrives with scrapes); an absence is
	// final at once.
	poll bool
}

var (
	hasData   = resultCheck{keep: func(float64) bool { return true }, ok: func(n int) bool { return n > 0 }, want: "a series with a value", poll: true}
	hasNoData = resultCheck{keep: func(f float64) bool { return f != 0 }, ok: func(n int) bool { return n == 0 }, want: "no series with a non-zero value"}
)

// checkTargets runs every panel target with vals substituted.
func checkTargets(ctx context.Context, t *testing.T, prom *promAPI, d dashboard, vals map[string][]string, start time.Time, check resultCheck) {
	t.Helper()
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			expr := substitute(tg.Expr, vals, start)
			cond := func() (bool, string) {
				n, err := prom.values(ctx, expr, tg.Instant, start, check.keep)
				if err != nil {
					return false, err.Error()
				}
				return check.ok(n), fmt.Sprintf("%d series with a value that counts", n)
			}
			what := fmt.Sprintf("%s for panel %q target %s: %s", check.want, p.Title, tg.RefID, expr)
			if check.poll {
				poll(t, time.Minute, what, cond)
			} else if ok, detail := cond(); !ok {
				t.Errorf("want %s: %s", what, detail)
			}
		}
	}
}

// runSuite runs the conformance suite against the testbed as against any
// cluster (profile cluster: the operator this test runs serves it) and
// pushes its results: latency at scale 2, and the inventory feature, whose
// per-GPU series come from this Prometheus (--prometheus-url), not from the
// agent. Everything goes into the lab's own namespace (--namespace), where
// the run must delete what it made and nothing else.
func runSuite(ctx context.Context, t *testing.T, c client.Client, suite, kubeconfig, ns, pushURL, promURL, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	baseline, err := filepath.Abs(filepath.Join("testdata", "baseline"))
	if err != nil {
		t.Fatal(err)
	}
	var before gpulabv1alpha1.GPUClusterList
	if err := c.List(ctx, &before, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, suite, "run", "--verbose", "--profile=cluster", "--kubeconfig="+kubeconfig,
		// The XID check needs the local profile's simulated agent: on
		// --profile=cluster it would be skipped, and the run PARTIAL.
		"--scale=2", "--feature=^(latency|inventory)$", "--skip-assess=critical XID", "--prometheus-url="+promURL, "--namespace="+ns,
		"--out="+out, "--pushgateway-url="+pushURL, "--cluster-name="+liveCluster,
		// The band of the conformance dashboard's "Against the baseline" row.
		"--push-baseline="+baseline)
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("conformance run failed: %v\n%s", err, tail(log, 8192))
		return
	}
	r, err := results.Read(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var perGPU *results.Assessment
	for _, f := range r.Features {
		for i, a := range f.Assessments {
			if a.Requirement == results.RequirementAcceleratorMetrics {
				perGPU = &f.Assessments[i]
			}
		}
	}
	if perGPU == nil || perGPU.Status != results.StatusPassed || !strings.Contains(string(log), "checked against Prometheus at "+promURL) {
		t.Errorf("the per-GPU series assessment %+v did not pass from Prometheus at %s:\n%s", perGPU, promURL, tail(log, 8192))
	}
	var after gpulabv1alpha1.GPUClusterList
	if err := c.List(ctx, &after, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) {
		t.Errorf("namespace %s held %d GPUClusters before the run and %d after: the run must delete its own and only those", ns, len(before.Items), len(after.Items))
	}
	t.Logf("conformance run:\n%s", tail(log, 2048))
}

// gpuCluster is a head and workers; workers take gpus H100s each (none when
// 0). Four workers of 8 H100s can never fit the fleet's three H100 nodes.
func gpuCluster(ns, name string, workers, gpus int32) *gpulabv1alpha1.GPUCluster {
	tmpl := func(container string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: container, Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"),
			}},
		}}}}
	}
	gc := &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Head:         gpulabv1alpha1.HeadSpec{Template: tmpl("head")},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "workers", Replicas: workers, Template: tmpl("worker")}},
		},
	}
	if gpus > 0 {
		gc.Spec.WorkerGroups[0].GPUs = &gpulabv1alpha1.GPURequest{PerPod: new(gpus), Product: "NVIDIA-H100-80GB-HBM3"}
	}
	return gc
}

// injectXID asks the testbed's agent to raise XIDs on a node's GPUs
// (annotation gpulab.io/simulate-xid, "<gpu>:<xid>").
func injectXID(t *testing.T, c client.Client, node, xids string) {
	t.Helper()
	var n corev1.Node
	if err := c.Get(t.Context(), client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations["gpulab.io/simulate-xid"] = xids
	if err := c.Patch(t.Context(), &n, patch); err != nil {
		t.Fatal(err)
	}
}
