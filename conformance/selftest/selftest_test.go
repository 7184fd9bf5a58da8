package selftest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/internal/testbin"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

var (
	// suite is the gpulab-conformance binary under test.
	suite string
	// api is the shared API server: gpulab's and Volcano's CRDs, a GPU
	// node, and an operator Lease whose holder has no Ready standby.
	api        *envtest.Environment
	kubeconfig string
)

const (
	operatorNamespace = "gpulab-system"
	leaderPod         = "gpulab-operator-a"
	unreadyPod        = "gpulab-operator-b"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// envtest logs through controller-runtime; its start-up is not news.
	ctrllog.SetLogger(logr.Discard())
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "gpulab-selftest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code, err := run(m, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func run(m *testing.M, dir string) (int, error) {
	ctx := context.Background()
	var err error
	if suite, err = buildSuite(ctx); err != nil {
		return 1, err
	}
	if api, err = envtest.Start(ctx, envtest.Options{}); err != nil {
		return 1, err
	}
	defer func() { _ = api.Stop() }()
	if kubeconfig, err = writeKubeconfig(api.Config, filepath.Join(dir, "kubeconfig")); err != nil {
		return 1, err
	}
	if err := seed(ctx, api.Client); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// buildSuite builds the suite as `make conformance` does, unless
// $GPULAB_CONFORMANCE_SUITE names a binary to test instead.
func buildSuite(ctx context.Context) (string, error) {
	if bin := os.Getenv("GPULAB_CONFORMANCE_SUITE"); bin != "" {
		return filepath.Abs(bin)
	}
	return testbin.Build(ctx, "selftest/gpulab-conformance", "./conformance", "test", "-c")
}

func writeKubeconfig(cfg *rest.Config, path string) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	return path, clientcmd.WriteToFile(*kc, path)
}

// seed gives the API server what a GPU cluster with gpulab has: two
// free 8-GPU nodes (the gang feature's least) and the operator's Lease,
// held by a Ready pod whose only other replica is not Ready.
func seed(ctx context.Context, c client.Client) error {
	for _, name := range []string{"gpu-0", "gpu-1"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, node); err != nil {
			return err
		}
		node.Status.Capacity = corev1.ResourceList{gfd.GPUResource: resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
		node.Status.Allocatable = node.Status.Capacity
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		if err := c.Status().Update(ctx, node); err != nil {
			return fmt.Errorf("node status: %w", err)
		}
		// The API server taints a new node not-ready; the node lifecycle
		// controller, which envtest lacks, lifts it once the node is Ready.
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if err := c.Update(ctx, node); err != nil {
			return fmt.Errorf("node taints: %w", err)
		}
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil {
		return err
	}
	labels := map[string]string{"app.kubernetes.io/name": "gpulab", "app.kubernetes.io/component": "operator", "pod-template-hash": "5d8f"}
	for name, ready := range map[string]corev1.ConditionStatus{leaderPod: corev1.ConditionTrue, unreadyPod: corev1.ConditionFalse} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{{Name: "manager", Image: "gpulab-operator:test"}}}}
		if err := c.Create(ctx, p); err != nil {
			return err
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}
		if err := c.Status().Update(ctx, p); err != nil {
			return fmt.Errorf("pod status: %w", err)
		}
	}
	holder := leaderPod + "_0f3c2a"
	return c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: profile.LeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}})
}

// suiteRun is one run of the binary: its exit code, output and results.
type suiteRun struct {
	code    int
	out     string
	results *results.Results // nil when none was written
	dir     string
}

// runSuite runs the controller feature on the API server with args.
func runSuite(t *testing.T, kc string, args ...string) suiteRun {
	t.Helper()
	return runFeature(t, kc, "controller", args...)
}

// runFeature runs one feature of the suite on the API server with args.
func runFeature(t *testing.T, kc, feature string, args ...string) suiteRun {
	t.Helper()
	if api == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args = append([]string{"run", "--profile=cluster", "--kubeconfig=" + kc, "--operator-namespace=" + operatorNamespace,
		"--out=" + dir, "--feature=^" + feature + "$"}, args...)
	cmd := exec.CommandContext(ctx, suite, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r := suiteRun{out: out.String(), dir: dir}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running the suite: %v\n%s", err, r.out)
	}
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err == nil {
		if r.results, err = results.Read(filepath.Join(dir, "results.json")); err != nil {
			t.Fatalf("reading results.json: %v", err)
		}
	}
	t.Logf("gpulab-conformance %s: exit %d", strings.Join(args, " "), r.code)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("its output:\n%s", r.out)
		}
	})
	return r
}

// assessment is the named assessment's record, failing the test when the
// run wrote none.
func (r suiteRun) assessment(t *testing.T, feature, name string) results.Assessment {
	t.Helper()
	if r.results == nil {
		t.Fatalf("exit %d and no results.json:\n%s", r.code, r.out)
	}
	for _, f := range r.results.Features {
		for _, a := range f.Assessments {
			if f.Name == feature && strings.HasPrefix(a.Name, name) {
				return a
			}
		}
	}
	t.Fatalf("no assessment %s/%q in the results:\n%s", feature, name, r.out)
	return results.Assessment{}
}

// leftovers are the objects with a run label still there and not being
// deleted (envtest runs no namespace controller: a deleted namespace
// stays Terminating).
func leftovers(t *testing.T, c client.Client) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	sel := cleanup.Selector("", true)
	lists := map[string]client.ObjectList{"Queue": &schedulingv1beta1.QueueList{}, "GPUCluster": &gpulabv1alpha1.GPUClusterList{},
		"Namespace": &corev1.NamespaceList{}, "Pod": &corev1.PodList{}}
	for kind, l := range lists {
		if err := c.List(ctx, l, sel); err != nil {
			t.Fatalf("listing %s: %v", kind, err)
		}
		items, err := metaItems(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range items {
			if obj.GetDeletionTimestamp() == nil {
				out = append(out, kind+" "+obj.GetNamespace()+"/"+obj.GetName())
			}
		}
	}
	return out
}

func metaItems(l client.ObjectList) ([]metav1.Object, error) {
	var out []metav1.Object
	switch l := l.(type) {
	case *schedulingv1beta1.QueueList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *gpulabv1alpha1.GPUClusterList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.NamespaceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.PodList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unexpected list %T", l)
	}
	return out, nil
}

// TestTimeoutEndsTheRunFailedWithResultsAndCleanup: a GPUCluster that no
// operator ever makes Ready, and a --timeout shorter than its wait. The
// run stops at the timeout, cleans up its namespace, GPUCluster and
// queue, writes results.json and junit.xml with a failed `run` entry
// naming the timeout, and exits 1 (Go's -test.timeout would panic: exit
// 2, nothing written, everything left).
func TestTimeoutEndsTheRunFailedWithResultsAndCleanup(t *testing.T) {
	start := time.Now()
	r := runSuite(t, kubeconfig, "--assess=^a valid GPUCluster", "--ready-timeout=10m", "--timeout=20s")
	if r.code != results.ExitFailed || r.results == nil {
		t.Fatalf("exit %d, results.json written: %v; want exit 1 and results:\n%s", r.code, r.results != nil, r.out)
	}
	if took := time.Since(start); took > 3*time.Minute {
		t.Errorf("the run took %s with --timeout=20s", took)
	}
	if r.results.Verdict != results.VerdictFailed {
		t.Errorf("verdict %s, want FAILED", r.results.Verdict)
	}
	stop := r.assessment(t, results.RunFeature, "the run finished within --timeout")
	if stop.Status != results.StatusFailed || !strings.Contains(stop.Reason, "--timeout=20s") {
		t.Errorf("run entry %+v, want failed naming --timeout=20s", stop)
	}
	if a := r.assessment(t, "controller", "a valid GPUCluster"); a.Status != results.StatusSkipped || !strings.Contains(a.Reason, "--timeout=20s") {
		t.Errorf("the assessment cut short: %+v, want skipped naming the timeout", a)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "junit.xml")); err != nil {
		t.Errorf("no junit.xml: %v", err)
	}
	if left := leftovers(t, api.Client); len(left) > 0 {
		t.Errorf("the run left %v", left)
	}
}

// TestLeaderKillIsOptInOnACluster: on --profile=cluster the leader kill is
// reported skipped, saying why, and nothing is created or killed.
func TestLeaderKillIsOptInOnACluster(t *testing.T) {
	r := runSuite(t, kubeconfig, "--assess=^the leader killed")
	a := r.assessment(t, "controller", "the leader killed")
	if a.Status != results.StatusSkipped || !strings.Contains(a.Reason, "--disruptive") {
		t.Errorf("leader kill without --disruptive: %s (%s), want skipped naming --disruptive\n%s", a.Status, a.Reason, r.out)
	}
	assertLeaderAlive(t)
}

// TestLeaderKillNeedsAReadyStandby: with --disruptive, a leader whose
// only other replica is not Ready is not killed: the assessment is
// skipped, saying why.
func TestLeaderKillNeedsAReadyStandby(t *testing.T) {
	r := runSuite(t, kubeconfig, "--assess=^the leader killed", "--disruptive")
	a := r.assessment(t, "controller", "the leader killed")
	if a.Status != results.StatusSkipped || !strings.Contains(a.Reason, "no second operator replica is Ready") {
		t.Errorf("leader kill with no Ready standby: %s (%s), want skipped for want of a standby\n%s", a.Status, a.Reason, r.out)
	}
	assertLeaderAlive(t)
}

func assertLeaderAlive(t *testing.T) {
	t.Helper()
	var p corev1.Pod
	err := api.Client.Get(context.Background(), client.ObjectKey{Namespace: operatorNamespace, Name: leaderPod}, &p)
	if err != nil || p.DeletionTimestamp != nil {
		t.Errorf("the leader pod was killed: %v, deleting %v", err, p.DeletionTimestamp)
	}
}

// TestDryRunListsDisruptiveActions: --dry-run says what the run would do
// beyond its own objects, whether it would, and who leads now.
func TestDryRunListsDisruptiveActions(t *testing.T) {
	r := runSuite(t, kubeconfig, "--dry-run")
	for _, want := range []string{"disruptive actions (--disruptive=false)", "force-delete", operatorNamespace + "/" + profile.LeaseName,
		"not taken: --disruptive not given"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("--dry-run lacks %q:\n%s", want, r.out)
		}
	}
	r = runSuite(t, kubeconfig, "--dry-run", "--disruptive")
	for _, want := range []string{"disruptive actions (--disruptive=true)", "WOULD TAKE",
		operatorNamespace + "/" + leaderPod + " leads with no second replica Ready"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("--dry-run --disruptive lacks %q:\n%s", want, r.out)
		}
	}
	assertLeaderAlive(t)
}

// TestInvalidGPUClustersAreTheRuns: on a cluster whose GPUCluster CRD
// validates nothing, the "invalid" GPUClusters are created. In a shared
// --namespace they must still be the run's (labelled, recorded) and
// deleted after it; another tenant's GPUCluster beside them stays.
func TestInvalidGPUClustersAreTheRuns(t *testing.T) {
	if api == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	set, err := binaries.Lookup(ctx, binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	crds, err := permissiveGPUClusterCRDs(filepath.Join(root, "operator", "config", "crd", "bases"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lax := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{crds, filepath.Join(set.VolcanoModuleDir, "config", "crd", "volcano", "bases")}})
	kc, err := writeKubeconfig(lax.Config, filepath.Join(t.TempDir(), "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if err := seed(ctx, lax.Client); err != nil {
		t.Fatal(err)
	}
	c := lax.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}); err != nil {
		t.Fatal(err)
	}
	tenant := &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "tenant"}}
	if err := c.Create(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	r := runSuite(t, kc, "--assess=^invalid GPUClusters", "--namespace=shared")
	if a := r.assessment(t, "controller", "invalid GPUClusters"); a.Status != results.StatusFailed {
		t.Errorf("invalid GPUClusters accepted: %s, want failed", a.Status)
	}
	var gcs gpulabv1alpha1.GPUClusterList
	if err := c.List(ctx, &gcs, client.InNamespace("shared")); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, gc := range gcs.Items {
		names = append(names, gc.Name)
	}
	if strings.Join(names, ",") != "tenant" {
		t.Errorf("GPUClusters in the shared namespace after the run: %v, want only the tenant's", names)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(tenant), tenant); apierrors.IsNotFound(err) {
		t.Error("the tenant's GPUCluster was deleted")
	}
}

// TestTimeoutCutsAWindowShort: a gang too big to fit the free room
// (the test binds the assessment's filler pod, as a scheduler would, and
// nothing else), watched for a --wait-window the --timeout cuts short.
// What the window saw before the deadline proves nothing: the assessment
// is skipped as stopped, never passed.
func TestTimeoutCutsAWindowShort(t *testing.T) {
	if api == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bound := make(chan error, 1)
	go func() { bound <- bindFiller(ctx, api.Client) }()
	const assessment = "a gang that fits the pool but is one GPU larger"
	r := runFeature(t, kubeconfig, "gang", "--assess=^"+assessment, "--wait-window=10m", "--timeout=25s")
	cancel()
	if err := <-bound; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("binding the filler pod: %v", err)
	}
	if a := r.assessment(t, "gang", assessment); a.Status != results.StatusSkipped || !strings.Contains(a.Reason, "--timeout=25s") {
		t.Errorf("the window cut short: %s (%s), want skipped naming the timeout", a.Status, a.Reason)
	}
	if r.code != results.ExitFailed {
		t.Errorf("exit %d, want 1", r.code)
	}
}

// bindFiller plays kube-scheduler, the namespace controller and the
// kubelet for the run's filler pod, which envtest lacks: it binds the pod
// to the node its affinity names, and once the run deletes it or its
// namespace, removes it as they would.
func bindFiller(ctx context.Context, c client.Client) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, cleanup.Selector("", true)); err != nil {
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			switch {
			case p.Name != "filler" || p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil:
			case p.DeletionTimestamp != nil || namespaceTerminating(ctx, c, p.Namespace):
				return true, c.Delete(ctx, p, client.GracePeriodSeconds(0))
			case p.Spec.NodeName == "":
				node := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
				b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
				_ = c.SubResource("binding").Create(ctx, p, b)
			}
		}
		return false, nil
	})
}

func namespaceTerminating(ctx context.Context, c client.Client, name string) bool {
	var ns corev1.Namespace
	return c.Get(ctx, client.ObjectKey{Name: name}, &ns) == nil && ns.DeletionTimestamp != nil
}

// TestOverCapacityNeedsDisruptiveWithPreemption: where Volcano's scheduler
// runs preempt, a pending over-capacity gang could make room by evicting
// other tenants' pods, so without --disruptive the scenario is skipped,
// saying why, and --dry-run says so before anything runs.
func TestOverCapacityNeedsDisruptiveWithPreemption(t *testing.T) {
	if api == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "volcano-system"}}
	if err := api.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "volcano-system", Name: "volcano-scheduler-configmap"},
		Data: map[string]string{"volcano-scheduler.conf": "actions: \"enqueue, allocate, preempt, backfill\"\n"}}
	if err := api.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Client.Delete(context.Background(), cm) })

	const assessment = "a gang that fits the pool but is one GPU larger"
	r := runFeature(t, kubeconfig, "gang", "--assess=^"+assessment)
	if a := r.assessment(t, "gang", assessment); a.Status != results.StatusSkipped || !strings.Contains(a.Reason, "runs preempt") ||
		!strings.Contains(a.Reason, "--disruptive") {
		t.Errorf("over capacity with preempt on: %s (%s), want skipped naming preempt and --disruptive", a.Status, a.Reason)
	}
	if r.code != results.ExitPartial {
		t.Errorf("exit %d, want 3 (partial)", r.code)
	}
	r = runFeature(t, kubeconfig, "gang", "--dry-run")
	if !strings.Contains(r.out, "SKIPPED: preempt on, --disruptive not given") || !strings.Contains(r.out, "ConfigMap volcano-system/volcano-scheduler-configmap") {
		t.Errorf("--dry-run does not say the over-capacity gangs are skipped:\n%s", r.out)
	}
}
