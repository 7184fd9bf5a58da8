package charts

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// prometheusOperatorModule holds the Prometheus Operator's CRDs
// (example/prometheus-operator-crd), so the API server validates the
// chart's monitors against their real schemas.
const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// prometheusOperatorCRDs fetches that module through the Go module proxy
// (cached like any module; outside this module, so go.mod is untouched)
// and returns the CRD files the chart's monitors need.
func prometheusOperatorCRDs(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", prometheusOperatorModule)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Error != "" {
		t.Fatalf("go mod download %s: %v %v %s", prometheusOperatorModule, err, jerr, mod.Error)
	}
	var files []string
	for _, kind := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
		files = append(files, filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+kind+".yaml"))
	}
	return files
}

// warnings collects the API server's warnings (Pod Security's among them).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// upgradeValues change the Deployment and turn the optional parts on.
const upgradeValues = `
operator:
  replicas: 1
  leaderElection: {enabled: false}
  watchNamespaces: [team-a]
  reconcileConcurrency: 8
  apiPriority: {enabled: true, concurrencyShares: 30}
monitoring:
  labels: {release: kube-prometheus-stack}
  serviceMonitor: {enabled: true}
  podMonitor: {enabled: true}
  prometheusRule: {enabled: true}
dashboards: {enabled: true}
agent: {labelNode: false}
conformanceRunner: {enabled: true}
`

// TestInstallUpgradeUninstall installs the chart with Helm's SDK on a real
// kube-apiserver, as `helm install` would: the CRDs become Established and
// every object is stored without a Pod Security warning; an upgrade
// changes the Deployment and adds the monitors (checked against the
// Prometheus Operator's own CRDs) and the conformance runner, whose
// ServiceAccount then holds every permission the suite's preflight checks
// and whose test pod the restricted namespace admits; an uninstall leaves
// no object of the chart behind but keeps the CRDs, as Helm does.
func TestInstallUpgradeUninstall(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	env := envtest.StartForTest(t, envtest.Options{CRDDirs: prometheusOperatorCRDs(t)})
	ctx := t.Context()
	c := env.Client

	// As `kubectl create namespace` and `kubectl label` in the README.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	warn := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = warn
	getter, err := NewRESTClientGetter(cfg, namespace)
	if err != nil {
		t.Fatal(err)
	}
	helm := new(action.Configuration)
	if err := helm.Init(getter, namespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	ch := loadChart(t)

	install := action.NewInstall(helm)
	install.ReleaseName, install.Namespace, install.Timeout = releaseName, namespace, 2*time.Minute
	start := time.Now()
	rel, err := install.RunWithContext(ctx, ch, nil)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("installed in %s", time.Since(start).Round(time.Millisecond))
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s, want deployed", rel.Info.Status)
	}
	logReleaseSize(t, c)

	crds := chartCRDNames(t)
	for _, name := range crds {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		if !condition(crd, "Established") {
			t.Errorf("CRD %s is not Established: %v", name, crd.Object["status"])
		}
	}
	installed := getAll(t, c, rel.Manifest)
	if len(installed) < 13 {
		t.Errorf("only %d objects installed", len(installed))
	}
	for _, w := range warn.all() {
		if strings.Contains(w, "PodSecurity") {
			t.Errorf("Pod Security warning: %s", w)
		}
	}
	// The check can fail: a Deployment without the chart's security
	// contexts draws the warning (a dry run stores nothing).
	probe, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bare := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "psa-probe", Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "psa-probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "psa-probe"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}}},
			},
		},
	}
	if _, err := probe.AppsV1().Deployments(namespace).Create(ctx, bare, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(warn.all(), func(w string) bool { return strings.Contains(w, "PodSecurity") }) {
		t.Error("no Pod Security warning for a Deployment that violates restricted: the check above proves nothing")
	}
	// A GPUCluster is served by the CRD Helm installed.
	gc := &unstructured.UnstructuredList{}
	gc.SetAPIVersion("gpulab.io/v1alpha1")
	gc.SetKind("GPUClusterList")
	if err := c.List(ctx, gc, client.InNamespace(namespace)); err != nil {
		t.Errorf("listing GPUClusters: %v", err)
	}

	// The runner's ServiceAccount holds nothing before the upgrade binds
	// it: the preflight check below can fail.
	if missing := conformancePreflight(t, cfg); len(missing) != rbac.Verbs(rbac.Rules()) {
		t.Errorf("before the runner is installed its ServiceAccount lacks only %d of %d permissions: %v", len(missing), rbac.Verbs(rbac.Rules()), missing)
	}

	upgrade := action.NewUpgrade(helm)
	upgrade.Namespace, upgrade.Timeout = namespace, 2*time.Minute
	rel2, err := upgrade.RunWithContext(ctx, releaseName, ch, values(t, upgradeValues))
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if rel2.Version != 2 || rel2.Info.Status != release.StatusDeployed {
		t.Errorf("after upgrade: revision %d, status %s", rel2.Version, rel2.Info.Status)
	}
	upgraded := getAll(t, c, rel2.Manifest)
	var dep appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "gpulab-operator"}, &dep); err != nil {
		t.Fatal(err)
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	if *dep.Spec.Replicas != 1 || !slices.Contains(args, "--leader-elect=false") ||
		!slices.Contains(args, "--watch-namespace=team-a") || !slices.Contains(args, "--reconcile-concurrency=8") {
		t.Errorf("the upgrade did not reach the Deployment: replicas %d, args %v", *dep.Spec.Replicas, args)
	}
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap", "FlowSchema", "PriorityLevelConfiguration"} {
		if !slices.ContainsFunc(upgraded, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind }) {
			t.Errorf("the upgrade installed no %s", kind)
		}
	}
	t.Run("conformance runner", func(t *testing.T) {
		// What `helm test` would check, from the API server's side: the
		// preflight's SelfSubjectAccessReviews as the ServiceAccount...
		if missing := conformancePreflight(t, cfg); len(missing) != 0 {
			t.Errorf("the runner's ServiceAccount lacks %v", missing)
		}
		// ...and the test pod, which an upgrade does not create, admitted
		// by the restricted namespace (a dry run stores nothing).
		var hook *release.Hook
		for _, h := range rel2.Hooks {
			if h.Kind == "Pod" && h.Name == conformanceTest && slices.Contains(h.Events, release.HookTest) {
				hook = h
			}
		}
		if hook == nil {
			t.Fatalf("no test hook Pod %s in the release", conformanceTest)
		}
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: conformanceTest}, &pod); !apierrors.IsNotFound(err) {
			t.Errorf("the test pod exists before `helm test`: %v", err)
		}
		objs, err := decode(hook.Manifest)
		if err != nil || len(objs) != 1 {
			t.Fatalf("hook manifest: %v (%d objects)", err, len(objs))
		}
		into(t, objs[0], &pod)
		before := len(warn.all())
		if _, err := probe.CoreV1().Pods(namespace).Create(ctx, &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("the API server refuses the test pod: %v", err)
		}
		for _, w := range warn.all()[before:] {
			if strings.Contains(w, "PodSecurity") {
				t.Errorf("Pod Security warning for the test pod: %s", w)
			}
		}
	})

	// What the new values drop is deleted.
	role := &unstructured.Unstructured{}
	role.SetAPIVersion("rbac.authorization.k8s.io/v1")
	role.SetKind("Role")
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "gpulab-operator-leader-election"}, role); !apierrors.IsNotFound(err) {
		t.Errorf("the leader-election Role survived an upgrade that turned leader election off: %v", err)
	}

	uninstall := action.NewUninstall(helm)
	uninstall.Wait, uninstall.Timeout = true, 2*time.Minute
	if _, err := uninstall.Run(releaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	for _, o := range append(installed, upgraded...) {
		gone(t, c, o)
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm", "name": releaseName}); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d release Secrets left after uninstall", len(secrets.Items))
	}
	for _, name := range crds {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Errorf("CRD %s after uninstall: %v (Helm keeps CRDs)", name, err)
		}
	}
}

// conformancePreflight runs the suite's preflight (conformance/rbac.Check:
// a SelfSubjectAccessReview per verb of its rules) as the chart's
// conformance ServiceAccount, impersonated, and returns what is denied.
func conformancePreflight(t *testing.T, cfg *rest.Config) []rbac.Missing {
	t.Helper()
	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + conformanceName,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	c, err := client.New(sa, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	missing, err := rbac.Check(t.Context(), c, rbac.Rules())
	if err != nil {
		t.Fatalf("preflight as the conformance ServiceAccount: %v", err)
	}
	return missing
}

// chartCRDNames are the names of the CRDs in the chart's crds/.
func chartCRDNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in the chart (%v)", err)
	}
	var names []string
	for _, f := range files {
		for _, o := range decodeFile(t, f) {
			names = append(names, o.GetName())
		}
	}
	return names
}

// getAll reads back every object of a release manifest, failing for any
// the API server does not hold.
func getAll(t *testing.T, c client.Client, manifest string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := decode(manifest)
	if err != nil {
		t.Fatalf("release manifest: %v", err)
	}
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s %s/%s was not stored: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			continue
		}
		if got.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" || got.GetAnnotations()["meta.helm.sh/release-name"] != releaseName {
			t.Errorf("%s %s lacks Helm's ownership metadata: %v %v", o.GetKind(), o.GetName(), got.GetLabels(), got.GetAnnotations())
		}
	}
	return objs
}

// gone waits (bounded) for an object to be deleted.
func gone(t *testing.T, c client.Client, o *unstructured.Unstructured) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		last = c.Get(ctx, client.ObjectKeyFromObject(o), got)
		return apierrors.IsNotFound(last), nil
	})
	if err != nil {
		t.Errorf("%s %s/%s still there after uninstall (last get: %v)", o.GetKind(), o.GetNamespace(), o.GetName(), last)
	}
}

func condition(o *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// logReleaseSize reports the release Secret's size: Helm stores the whole
// chart (CRDs and dashboards included) there, and a Secret holds at most 1 MiB.
func logReleaseSize(t *testing.T, c client.Client) {
	t.Helper()
	var secrets corev1.SecretList
	if err := c.List(t.Context(), &secrets, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm", "name": releaseName}); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		n := len(s.Data["release"])
		t.Logf("release Secret %s: %d bytes", s.Name, n)
		if n > 900<<10 {
			t.Errorf("release Secret %s is %d bytes, close to the 1 MiB limit", s.Name, n)
		}
	}
}
