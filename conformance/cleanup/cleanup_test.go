package cleanup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// env is a real API server serving gpulab's, Volcano's and KubeRay's
// kinds, as a shared GPU cluster does. No controller runs: what is deleted
// stays deleted, and a namespace stays Terminating. Each test uses its own
// namespaces and run ids.
var env *envtest.Environment

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		e, err := startEnvtest(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		env = e
	}
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

func startEnvtest(ctx context.Context) (*envtest.Environment, error) {
	set, err := binaries.Lookup(ctx, binaries.Options{})
	if err != nil {
		return nil, err
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	return envtest.Start(ctx, envtest.Options{CRDDirs: []string{
		filepath.Join(root, "operator", "config", "crd", "bases"),
		filepath.Join(set.VolcanoModuleDir, "config", "crd", "volcano", "bases"),
		filepath.Join(set.KubeRayModuleDir, "config", "crd", "bases"),
	}})
}

func apiServer(t *testing.T) client.Client {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	return env.Client
}

func labels(runID string) map[string]string {
	if runID == "" {
		return nil
	}
	return map[string]string{RunIDLabel: runID}
}

func pod(ns, name, runID string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels(runID)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
}

func gpuCluster(ns, name, runID string) *gpulabv1alpha1.GPUCluster {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	return &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels(runID)},
		Spec: gpulabv1alpha1.GPUClusterSpec{Head: gpulabv1alpha1.HeadSpec{Template: tmpl},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "w", Replicas: 1, Template: tmpl}}}}
}

func gpuJob(ns, name, runID string) *gpulabv1alpha1.GPUJob {
	return &gpulabv1alpha1.GPUJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels(runID)},
		Spec: gpulabv1alpha1.GPUJobSpec{ClusterRef: &corev1.LocalObjectReference{Name: "x"}, Submitter: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}}}
}

func vcJob(ns, name, runID string) *batchv1alpha1.Job {
	return &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels(runID)},
		Spec: batchv1alpha1.JobSpec{Tasks: []batchv1alpha1.TaskSpec{{Name: "t", Replicas: 1,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}}}}}
}

func rayCluster(ns, name, runID string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"headGroupSpec": map[string]any{
		"rayStartParams": map[string]any{},
		"template":       map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "ray-head", "image": "ray"}}}},
	}}}}
	u.SetAPIVersion("ray.io/v1")
	u.SetKind("RayCluster")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(labels(runID))
	return u
}

func queue(name, runID string) *schedulingv1beta1.Queue {
	return &schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(runID)}, Spec: schedulingv1beta1.QueueSpec{Weight: 1}}
}

// runObjects are one run's objects of every kind it creates, in a shared
// namespace (as --namespace puts them) and in a namespace of its own.
func runObjects(shared, own, runID string) []client.Object {
	return []client.Object{
		gpuJob(shared, "job-"+runID, runID), gpuCluster(shared, "gc-"+runID, runID), rayCluster(shared, "ray-"+runID, runID),
		vcJob(shared, "vcjob-"+runID, runID), pod(shared, "pod-"+runID, runID), pod(own, "pod-"+runID, runID),
		queue("queue-"+runID, runID),
	}
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// gone says whether obj is deleted or being deleted.
func gone(t *testing.T, c client.Client, obj client.Object) bool {
	t.Helper()
	got := &metav1.PartialObjectMetadata{}
	got.SetGroupVersionKind(gvkOf(t, c, obj))
	err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), got)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("getting %s: %v", obj.GetName(), err)
	}
	return err != nil || got.DeletionTimestamp != nil
}

func gvkOf(t *testing.T, c client.Client, obj client.Object) schema.GroupVersionKind {
	t.Helper()
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return gvk
}

// TestRunDeletesTheRunsObjectsOnly is a run that left one of everything it
// creates in a shared namespace and in one of its own: Run with its id
// deletes all of it, RayClusters and Volcano Jobs included, and nothing of
// another tenant's or another run's; AllRuns then deletes the other run's.
func TestRunDeletesTheRunsObjectsOnly(t *testing.T) {
	c := apiServer(t)
	ctx := context.Background()
	const shared, own, other = "shared", "gpulab-conformance-run-a", "gpulab-conformance-run-b"
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shared}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own, Labels: labels("a")}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other, Labels: labels("b")}})
	runA, runB := runObjects(shared, own, "a"), runObjects(shared, other, "b")
	tenant := []client.Object{gpuJob(shared, "tenant", ""), gpuCluster(shared, "tenant", ""), rayCluster(shared, "tenant", ""),
		vcJob(shared, "tenant", ""), pod(shared, "tenant", ""), queue("tenant", "")}
	create(t, c, slices.Concat(runA, runB, tenant)...)

	rep, err := Run(ctx, Options{Client: c, RunID: "a", Timeout: 30 * time.Second, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, obj := range append(runA, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own}}) {
		if !gone(t, c, obj) {
			t.Errorf("run a's %T %s/%s was left behind", obj, obj.GetNamespace(), obj.GetName())
		}
	}
	for _, obj := range slices.Concat(runB, tenant) {
		if gone(t, c, obj) {
			t.Errorf("%T %s/%s, not run a's, was deleted", obj, obj.GetNamespace(), obj.GetName())
		}
	}
	for _, kind := range []string{"RayCluster", "Job", "GPUCluster", "GPUJob", "Pod", "Namespace", "Queue"} {
		if len(rep.Found[kind]) == 0 {
			t.Errorf("the report lists no %s: %v", kind, rep.Found)
		}
	}

	if _, err := Run(ctx, Options{Client: c, AllRuns: true, Timeout: 30 * time.Second, Interval: 100 * time.Millisecond}); err != nil {
		t.Fatalf("Run all runs: %v", err)
	}
	for _, obj := range runB {
		if !gone(t, c, obj) {
			t.Errorf("all runs: run b's %T %s was left behind", obj, obj.GetName())
		}
	}
	for _, obj := range tenant {
		if gone(t, c, obj) {
			t.Errorf("all runs: the tenant's %T %s was deleted", obj, obj.GetName())
		}
	}
	if _, err := Run(ctx, Options{Client: c}); err == nil {
		t.Error("Run with neither a run id nor all runs did not refuse")
	}
}

// TestPodsCountsTheRunsOwn is a shared namespace where another tenant's
// pod and another run's sit beside the run's: only the run's are its.
func TestPodsCountsTheRunsOwn(t *testing.T) {
	c := apiServer(t)
	ctx := context.Background()
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared-pods"}},
		pod("shared-pods", "tenant", ""), pod("shared-pods", "other-run", "d"), pod("shared-pods", "mine-0", "c"), pod("shared-pods", "mine-1", "c"),
		pod("default", "mine-elsewhere", "c"))
	pods, err := Pods(ctx, c, "shared-pods", Selector("c", false))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "mine-0,mine-1" {
		t.Errorf("the run's pods in shared-pods: %v, want mine-0 and mine-1", names)
	}
}

// TestCreateAllRecordsEveryCreate is a burst whose second create fails:
// the creates after it still happen and are returned, so cleanup deletes
// them.
func TestCreateAllRecordsEveryCreate(t *testing.T) {
	c := apiServer(t)
	ctx := context.Background()
	create(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm-1"}})
	var objs []client.Object
	for _, name := range []string{"cm-0", "cm-1", "cm-2", "cm-3"} {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
	}
	// One at a time, in order: the failure comes before the later creates.
	created, err := CreateAll(ctx, c, objs, 1, nil, nil)
	if !apierrors.IsAlreadyExists(errors.Unwrap(err)) && (err == nil || !strings.Contains(err.Error(), "cm-1")) {
		t.Errorf("error %v, want cm-1's AlreadyExists", err)
	}
	var names []string
	for _, obj := range created {
		names = append(names, obj.GetName())
	}
	if strings.Join(names, ",") != "cm-0,cm-2,cm-3" {
		t.Errorf("recorded as created: %v, want cm-0, cm-2 and cm-3", names)
	}
}

// TestCreateAllReactsOutsideTheSlots is a burst of one create at a time
// whose reactions each wait until every create has been issued: a
// reaction holding its create's slot would keep the next create waiting
// until the deadline. Each gang's clock (before) starts right as its own
// create is issued, never while another create or a reaction runs.
func TestCreateAllReactsOutsideTheSlots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var log []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, s)
	}
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			note("create " + obj.GetName())
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	var objs []client.Object
	for i := range 4 {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d", i)}})
	}
	issued, started := make(chan struct{}), atomic.Int32{}
	before := func(i int) {
		note("before " + objs[i].GetName())
		if started.Add(1) == int32(len(objs)) {
			close(issued)
		}
	}
	after := func(i int) error {
		select {
		case <-issued:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%s's reaction waited for the burst until the deadline: it held a create slot", objs[i].GetName())
		}
	}
	created, err := CreateAll(ctx, c, objs, 1, before, after)
	if err != nil || len(created) != len(objs) {
		t.Fatalf("created %d of %d: %v", len(created), len(objs), err)
	}
	// One at a time: each create right after its own before.
	var want []string
	for _, obj := range objs {
		want = append(want, "before "+obj.GetName(), "create "+obj.GetName())
	}
	if !slices.Equal(log, want) {
		t.Errorf("order %v, want %v", log, want)
	}
}

// TestCreateAllJoinsReactionErrors: a failed reaction is reported with
// the creates' errors, and a failed create gets no reaction.
func TestCreateAllJoinsReactionErrors(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm-1"}}).Build()
	var objs []client.Object
	for i := range 3 {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d", i)}})
	}
	var reacted sync.Map
	created, err := CreateAll(context.Background(), c, objs, 2, nil, func(i int) error {
		reacted.Store(i, true)
		if i == 2 {
			return errors.New("cm-2's children refused")
		}
		return nil
	})
	if len(created) != 2 || err == nil || !strings.Contains(err.Error(), "cm-1") || !strings.Contains(err.Error(), "cm-2's children refused") {
		t.Errorf("created %d, error %v: want 2 created, cm-1's create and cm-2's reaction failed", len(created), err)
	}
	if _, ok := reacted.Load(1); ok {
		t.Error("a failed create got a reaction")
	}
}
