package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/conformance/runlock"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestCleanupKeepsWhatOthersUse: `cleanup --run-id` of a run (here one
// never submitted) keeps the runner's shared RBAC while another run's
// marker exists in another namespace, keeps it and the namespace while the
// shipped nightly CronJob is in it, and keeps a namespace holding what
// submit did not create; --dry-run lists what would go and what stays.
// Each case has its own runner namespace, so each fails on its own.
func TestCleanupKeepsWhatOthersUse(t *testing.T) {
	// A real API server; no CRDs but gpulab's are needed.
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	env := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{filepath.Join(root, "operator", "config", "crd", "bases")}})
	c, kubeconfig := env.Client, writeKubeconfig(t, env.Config)
	ctx := context.Background()
	// install creates what submit creates the first time in ns (all of it
	// carries ManagedBy), leaving what is there (the cluster-scoped ones
	// another case made).
	install := func(t *testing.T, ns string) {
		t.Helper()
		for _, obj := range incluster.Shared(ns) {
			if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating %s: %v", obj.GetName(), err)
			}
		}
	}
	gone := func(t *testing.T, obj client.Object) bool {
		t.Helper()
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		// envtest runs no namespace controller: a deleted one stays Terminating.
		return err != nil || obj.GetDeletionTimestamp() != nil
	}
	role := func() client.Object { return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: rbac.Name}} }
	binding := func() client.Object {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: rbac.Name}}
	}
	namespace := func(ns string) client.Object { return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}} }
	cli := func(t *testing.T, ns string, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"cleanup", "--kubeconfig", kubeconfig, "--run-id", "never-submitted", "--runner-namespace", ns}, args...)
		if _, code := Main(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d:\n%s%s", args, code, out.String(), errOut.String())
		}
		return out.String()
	}

	t.Run("another run's marker in another namespace", func(t *testing.T) {
		const ns = "runner-a"
		install(t, ns)
		if err := c.Create(ctx, namespace("elsewhere")); err != nil {
			t.Fatal(err)
		}
		// A run from a laptop, recorded in another namespace, is mid-run.
		other, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: "elsewhere", RunID: "laptop-1", AllowConcurrent: true})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := other.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		out := cli(t, ns, "--dry-run")
		if !strings.Contains(out, "keeps ClusterRole "+rbac.Name+": in use by run laptop-1") || strings.Contains(out, "would delete ClusterRole") {
			t.Errorf("--dry-run beside run laptop-1 does not say the ClusterRole stays for it:\n%s", out)
		}
		out = cli(t, ns)
		if gone(t, role()) || gone(t, binding()) || gone(t, namespace(ns)) {
			t.Errorf("cleanup --run-id never-submitted deleted the shared RBAC while run laptop-1 runs:\n%s", out)
		}
	})

	t.Run("the nightly CronJob in the runner namespace", func(t *testing.T) {
		const ns = "runner-b"
		install(t, ns)
		data, err := os.ReadFile("../config/nightly/cronjob.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var cj batchv1.CronJob
		if err := yaml.UnmarshalStrict(data, &cj); err != nil {
			t.Fatal(err)
		}
		if cj.Labels[incluster.SharedUserLabel] == "" || cj.Spec.JobTemplate.Labels[incluster.SharedUserLabel] == "" {
			t.Errorf("the nightly CronJob or its jobTemplate lacks %s: its Jobs would not count as runs", incluster.SharedUserLabel)
		}
		cj.Namespace = ns
		if err := c.Create(ctx, &cj); err != nil {
			t.Fatal(err)
		}
		out := cli(t, ns)
		if gone(t, role()) || gone(t, binding()) || gone(t, namespace(ns)) || gone(t, &cj) {
			t.Errorf("cleanup deleted the shared objects beside the nightly CronJob:\n%s", out)
		}
		if !strings.Contains(out, "in use by CronJob "+ns+"/"+cj.Name) {
			t.Errorf("cleanup does not say the nightly keeps the shared objects:\n%s", out)
		}
		if err := c.Delete(ctx, &cj); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("nothing uses them, but the namespace holds a team's ConfigMap", func(t *testing.T) {
		const ns = "runner-c"
		install(t, ns)
		theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-settings"}}
		if err := c.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		out := cli(t, ns, "--dry-run")
		for _, want := range []string{"would delete ClusterRole " + rbac.Name, "would delete ClusterRoleBinding " + rbac.Name,
			"would delete ServiceAccount " + ns + "/" + rbac.Name, "keeps Namespace " + ns + ": holds what submit did not create: ConfigMap " + ns + "/team-settings"} {
			if !strings.Contains(out, want) {
				t.Errorf("--dry-run lacks %q:\n%s", want, out)
			}
		}
		if gone(t, role()) || gone(t, binding()) {
			t.Fatalf("--dry-run deleted:\n%s", out)
		}
		out = cli(t, ns)
		if !gone(t, role()) || !gone(t, binding()) || gone(t, namespace(ns)) || gone(t, theirs) {
			t.Errorf("unused RBAC gone %v/%v (want both), namespace gone %v, its ConfigMap gone %v (want neither):\n%s",
				gone(t, role()), gone(t, binding()), gone(t, namespace(ns)), gone(t, theirs), out)
		}
	})
}

// A run's own end-of-run cleanup deletes what carries its label
// (cleanup.Run): the shared objects must never carry it.
func TestSharedObjectsAreNoRunsToDelete(t *testing.T) {
	for _, obj := range incluster.Shared(incluster.DefaultNamespace) {
		if _, ok := obj.GetLabels()[cleanup.RunIDLabel]; ok {
			t.Errorf("%T %s carries %s", obj, obj.GetName(), cleanup.RunIDLabel)
		}
	}
}
