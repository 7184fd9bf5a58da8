package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// writeKubeconfig writes cfg (envtest's: client certificates) as a
// kubeconfig file, as a user of the CLI has one.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCleanupCommand is what a killed run left in a shared namespace
// (a RayCluster, a Volcano Job, a pod) and its queue, beside a tenant's
// pod and another run's: `cleanup --run-id` deletes the run's only,
// --dry-run deletes nothing, and --all-runs takes the other run's too.
func TestCleanupCommand(t *testing.T) {
	if testing.Short() {
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
	env := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{
		filepath.Join(root, "operator", "config", "crd", "bases"),
		filepath.Join(set.VolcanoModuleDir, "config", "crd", "volcano", "bases"),
		filepath.Join(set.KubeRayModuleDir, "config", "crd", "bases"),
	}})
	c, kubeconfig := env.Client, writeKubeconfig(t, env.Config)
	run := func(runID string) map[string]string { return map[string]string{cleanup.RunIDLabel: runID} }
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}
	ray := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"headGroupSpec": map[string]any{
		"rayStartParams": map[string]any{},
		"template":       map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "ray-head", "image": "ray"}}}},
	}}}}
	ray.SetAPIVersion("ray.io/v1")
	ray.SetKind("RayCluster")
	ray.SetNamespace("shared")
	ray.SetName("gang")
	ray.SetLabels(run("killed"))
	left := []client.Object{
		ray,
		&batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "gang", Labels: run("killed")},
			Spec: batchv1alpha1.JobSpec{Tasks: []batchv1alpha1.TaskSpec{{Name: "t", Replicas: 1, Template: corev1.PodTemplateSpec{Spec: podSpec}}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "gang-worker-0", Labels: run("killed")}, Spec: podSpec},
		&schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "gpulab-conformance-killed", Labels: run("killed")}, Spec: schedulingv1beta1.QueueSpec{Weight: 1}},
	}
	tenant := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "tenant"}, Spec: podSpec}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "other-run", Labels: run("other")}, Spec: podSpec}
	for _, obj := range append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}, tenant, other}, left...) {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetName(), err)
		}
	}
	exists := func(obj client.Object) bool {
		t.Helper()
		got := &metav1.PartialObjectMetadata{}
		gvk, err := c.GroupVersionKindFor(obj)
		if err != nil {
			t.Fatal(err)
		}
		got.SetGroupVersionKind(gvk)
		err = c.Get(ctx, client.ObjectKeyFromObject(obj), got)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	cli := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		_, code := Main(append([]string{"cleanup", "--kubeconfig", kubeconfig}, args...), &out, &errOut)
		return out.String() + errOut.String(), code
	}

	if out, code := cli("--run-id", "killed", "--dry-run"); code != 0 || !strings.Contains(out, "would delete 1 RayCluster: shared/gang") {
		t.Errorf("--dry-run: exit %d:\n%s", code, out)
	}
	for _, obj := range left {
		if !exists(obj) {
			t.Errorf("--dry-run deleted %s", obj.GetName())
		}
	}
	if out, code := cli("--run-id", "killed"); code != 0 {
		t.Errorf("cleanup --run-id killed: exit %d:\n%s", code, out)
	}
	for _, obj := range left {
		if exists(obj) {
			t.Errorf("cleanup --run-id left %T %s", obj, obj.GetName())
		}
	}
	if !exists(tenant) || !exists(other) {
		t.Error("cleanup --run-id deleted a pod that was not the run's")
	}
	if out, code := cli("--all-runs"); code != 0 || exists(other) || !exists(tenant) {
		t.Errorf("cleanup --all-runs: exit %d, other run's pod left %v, tenant's left %v:\n%s", code, exists(other), exists(tenant), out)
	}
	for _, args := range [][]string{nil, {"--run-id", "x", "--all-runs"}, {"--run-id", "x", "extra"}} {
		if out, code := cli(args...); code != 2 {
			t.Errorf("cleanup %v: exit %d, want 2:\n%s", args, code, out)
		}
	}
}
