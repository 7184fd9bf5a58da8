package incluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// The runner's own objects must never carry the run's label: the run
// deletes everything with it at its end, its own pod included.
func TestRunnerPodIsNotTheRunsToDelete(t *testing.T) {
	job := incluster.Job(incluster.Options{Image: "gpulab-conformance:dev", RunID: "r1", Args: []string{"--max-gpus=8"}})
	for _, l := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
		if _, ok := l[cleanup.RunIDLabel]; ok {
			t.Errorf("runner labels %v carry %s", l, cleanup.RunIDLabel)
		}
		if l[incluster.RunnerLabel] != "r1" {
			t.Errorf("runner labels %v lack %s=r1", l, incluster.RunnerLabel)
		}
	}
	spec := job.Spec.Template.Spec
	args := spec.Containers[0].Args
	for _, want := range []string{"run", "--profile=cluster", "--run-id=r1", "--results-configmap=gpulab-conformance/gpulab-conformance-results-r1", "--max-gpus=8"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if *job.Spec.BackoffLimit != 0 || spec.RestartPolicy != corev1.RestartPolicyNever || spec.ServiceAccountName != rbac.Name {
		t.Errorf("the Job may retry or runs as another account: %+v", job.Spec)
	}
	sc := spec.Containers[0].SecurityContext
	if !*spec.SecurityContext.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("not restricted: %+v %+v", spec.SecurityContext, sc)
	}
}

func TestSubmitStoreRetrieveCleanup(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{})
	c := env.Client
	ctx := context.Background()
	const ns = incluster.DefaultNamespace

	// A reviewed install of the ClusterRole is there first: used, never
	// changed or deleted.
	theirs := rbac.ClusterRole()
	if err := c.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	created, err := incluster.Submit(ctx, c, incluster.Options{Image: "gpulab-conformance:dev", RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(created, func(s string) bool { return strings.HasPrefix(s, "ClusterRole ") }) || len(created) != 5 {
		t.Errorf("Submit created %v: want the namespace, admission policy and its binding, ServiceAccount and role binding, not the existing ClusterRole", created)
	}
	if _, err := incluster.Submit(ctx, c, incluster.Options{Image: "gpulab-conformance:dev", RunID: "r1"}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("submitting run r1 twice: %v, want AlreadyExists", err)
	}
	if created, err := incluster.Submit(ctx, c, incluster.Options{Image: "gpulab-conformance:dev", RunID: "r2"}); err != nil || len(created) != 0 {
		t.Errorf("a second run: created %v, %v; want the shared objects reused", created, err)
	}

	// Before anything is stored: a Pending run without a verdict.
	st, err := incluster.Status(ctx, c, ns, "r1")
	if err != nil || st.Phase != "Pending" || st.Verdict != "" {
		t.Errorf("Status before the pod: %+v, %v", st, err)
	}
	// The pod ran and exited 3 (PARTIAL): envtest runs no Job controller
	// and no kubelet, so the test creates the Job's pod and writes what a
	// kubelet would. The namespace enforces restricted Pod Security, which
	// the Job's pod passes.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1-pod", Labels: map[string]string{incluster.RunnerLabel: "r1"}},
		Spec: incluster.Job(incluster.Options{Image: "gpulab-conformance:dev", RunID: "r1"}).Spec.Template.Spec}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "conformance", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	for name, content := range map[string]string{"results.json": `{"verdict":"PARTIAL"}`, "junit.xml": "<x/>", "logs/operator.log": "log"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(out, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := incluster.Store(ctx, c, ns, incluster.ConfigMapName("r1"), "r1", "PARTIAL", out); err != nil {
		t.Fatal(err)
	}
	st, err = incluster.Status(ctx, c, ns, "r1")
	if err != nil || st.Phase != "Finished" || st.ExitCode != 3 || st.Verdict != "PARTIAL" || st.Pod != "r1-pod" {
		t.Errorf("Status after the run: %+v, %v", st, err)
	}
	back := t.TempDir()
	got, err := incluster.Retrieve(ctx, c, ns, "r1", back, incluster.RetrieveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	files := got.Files
	slices.Sort(files)
	if want := []string{"junit.xml", filepath.Join("logs", "operator.log"), "results.json"}; !slices.Equal(files, want) {
		t.Errorf("retrieved %v, want %v", files, want)
	}
	if data, _ := os.ReadFile(filepath.Join(back, "results.json")); string(data) != `{"verdict":"PARTIAL"}` {
		t.Errorf("results.json retrieved as %q", data)
	}

	// A stored name that would leave the folder is refused.
	evil := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: incluster.ConfigMapName("evil")},
		BinaryData: map[string][]byte{incluster.ResultsKey: craft(t, entry{name: "../escape", body: "x"})}}
	if err := c.Create(ctx, evil); err != nil {
		t.Fatal(err)
	}
	if _, err := incluster.Retrieve(ctx, c, ns, "evil", t.TempDir(), incluster.RetrieveOptions{}); err == nil || !strings.Contains(err.Error(), "not a file inside") {
		t.Errorf("Retrieve of ../escape: %v", err)
	}

	// Cleaning up r1 keeps what r2 still uses; cleaning up r2 removes what
	// Submit created, and leaves the ClusterRole it found.
	deleted, err := incluster.Cleanup(ctx, c, ns, "r1")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range incluster.RunObjects(ns, "r1")[:3] { // the Job and the first two results ConfigMaps
		if want := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.") + " " + ns + "/" + obj.GetName(); !slices.Contains(deleted, want) {
			t.Errorf("Cleanup r1 deleted %v, want %s among them", deleted, want)
		}
	}
	if slices.ContainsFunc(deleted, func(s string) bool { return !strings.Contains(s, "-r1") }) {
		t.Errorf("Cleanup r1 deleted %v: only run r1's objects, r2 still uses the rest", deleted)
	}
	// An older submit's namespace-wide results Role goes with the rest.
	legacy := metav1.ObjectMeta{Namespace: ns, Name: rbac.Name + "-results", Labels: map[string]string{incluster.ManagedByLabel: incluster.ManagedBy}}
	if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: legacy}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: *legacy.DeepCopy(), Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: rbac.Name, Namespace: ns}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: legacy.Name}}); err != nil {
		t.Fatal(err)
	}
	deleted, err = incluster.Cleanup(ctx, c, ns, "r2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Job " + ns + "/" + incluster.JobName("r2"), "ClusterRoleBinding " + rbac.Name, "Namespace " + ns,
		"Role " + ns + "/" + legacy.Name, "RoleBinding " + ns + "/" + legacy.Name} {
		if !slices.Contains(deleted, want) {
			t.Errorf("Cleanup r2 deleted %v, want %s among them", deleted, want)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), &rbacv1.ClusterRole{}); err != nil {
		t.Errorf("the ClusterRole Submit found was deleted: %v", err)
	}
	// A binding of the runner's name made for another namespace (the
	// chart's runner binds its release's) is refused by name, not left to
	// fail the run's preflight.
	other := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: rbac.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: rbac.Name, Namespace: "gpulab-system"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbac.Name}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := incluster.Submit(ctx, c, incluster.Options{Namespace: "other-runner", Image: "gpulab-conformance:dev", RunID: "r3"}); err == nil ||
		!strings.Contains(err.Error(), "--runner-namespace") || !strings.Contains(err.Error(), "ServiceAccount gpulab-system/gpulab-conformance") {
		t.Errorf("submitting beside another namespace's binding: %v, want a refusal naming --runner-namespace", err)
	}

	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.DeletionTimestamp == nil {
			t.Errorf("Job %s left", j.Name)
		}
	}
}
