package faults

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

const pkg = "github.com/gpulab/gpulab/operator/internal/faults"

// TestOnlyFaultBuildsLinkTheInterceptor: the operator binary depends on
// this package only when built with -tags gpulab_faults.
func TestOnlyFaultBuildsLinkTheInterceptor(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	deps := func(tags ...string) string {
		args := append([]string{"list", "-deps"}, tags...)
		cmd := exec.Command("go", append(args, "./operator/cmd/gpulab-operator")...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %v: %v", cmd.Args[1:], err)
		}
		return string(out)
	}
	if strings.Contains(deps(), pkg+"\n") {
		t.Errorf("a normal operator build links %s", pkg)
	}
	if !strings.Contains(deps("-tags", "gpulab_faults"), pkg+"\n") {
		t.Errorf("an operator built with -tags gpulab_faults does not link %s: the planted faults are not wired", pkg)
	}
}

func scheme(t *testing.T) *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, schedulingv1beta1.AddToScheme, gpulabv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func wrapped(t *testing.T, fault string, objs ...client.Object) (client.WithWatch, client.Client) {
	t.Helper()
	base := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).
		WithStatusSubresource(&gpulabv1alpha1.GPUCluster{}).Build()
	c, err := Wrap(base, fault)
	if err != nil {
		t.Fatal(err)
	}
	return c, base
}

func podGroup(cluster string) *schedulingv1beta1.PodGroup {
	mr := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cluster + "-pg", Labels: map[string]string{gpulabv1alpha1.ClusterLabel: cluster}},
		Spec:       schedulingv1beta1.PodGroupSpec{MinMember: 3, MinTaskMember: map[string]int32{"head": 1, "workers": 2}, MinResources: &mr},
	}
}

func gangPod(cluster, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
		Labels:      map[string]string{gpulabv1alpha1.ClusterLabel: cluster},
		Annotations: map[string]string{schedulingv1beta1.KubeGroupNameAnnotationKey: cluster + "-pg"}}}
}

func TestUnknownFault(t *testing.T) {
	if _, err := NewClientFunc("no-such-fault"); err == nil || !strings.Contains(err.Error(), "ready-early") {
		t.Fatalf("NewClientFunc(unknown) = %v, want an error listing the faults", err)
	}
	if f, err := NewClientFunc(""); f != nil || err != nil {
		t.Fatalf("NewClientFunc(\"\") = %v, %v; want the default client", f, err)
	}
}

func TestPodsBeforePodGroup(t *testing.T) {
	ctx := context.Background()
	c, base := wrapped(t, PodsBeforePodGroup)
	if err := c.Create(ctx, podGroup("a")); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-pg"}, &schedulingv1beta1.PodGroup{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the first PodGroup create was not swallowed: get = %v", err)
	}
	if err := c.Create(ctx, podGroup("a")); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-pg"}, &schedulingv1beta1.PodGroup{}); err != nil {
		t.Fatalf("the second PodGroup create was swallowed too: %v", err)
	}
}

func TestDuplicatePod(t *testing.T) {
	ctx := context.Background()
	c, base := wrapped(t, DuplicatePod)
	for _, name := range []string{"a-head", "a-workers-0"} {
		if err := c.Create(ctx, gangPod("a", name)); err != nil {
			t.Fatal(err)
		}
	}
	var pods corev1.PodList
	if err := base.List(ctx, &pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("%d pods, want the two created and one -dup", len(pods.Items))
	}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-head-dup"}, &corev1.Pod{}); err != nil {
		t.Fatalf("no copy of the first pod: %v", err)
	}
}

func TestWrongMinMember(t *testing.T) {
	ctx := context.Background()
	c, base := wrapped(t, WrongMinMember)
	if err := c.Create(ctx, podGroup("a")); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		pg := &schedulingv1beta1.PodGroup{}
		if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-pg"}, pg); err != nil {
			t.Fatal(err)
		}
		if pg.Spec.MinMember != 1 || pg.Spec.MinTaskMember != nil || pg.Spec.MinResources != nil {
			t.Errorf("after %s the PodGroup spec is %+v, want minMember 1 and nothing else holding the gang", when, pg.Spec)
		}
	}
	check("create")
	pg := &schedulingv1beta1.PodGroup{}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-pg"}, pg); err != nil {
		t.Fatal(err)
	}
	pg.Spec = podGroup("a").Spec
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}
	check("update")
}

func TestPodAfterPodGroupDeleted(t *testing.T) {
	ctx := context.Background()
	c, base := wrapped(t, PodAfterPodGroupDeleted, podGroup("a"))
	if err := c.Create(ctx, gangPod("a", "a-head")); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-pg"}, &schedulingv1beta1.PodGroup{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the PodGroup survived the first pod create: get = %v", err)
	}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-head"}, &corev1.Pod{}); err != nil {
		t.Fatalf("the pod was not created: %v", err)
	}
	// Once per gang: the recreated PodGroup stays.
	if err := c.Create(ctx, podGroup("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, gangPod("a", "a-workers-0")); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a-pg"}, &schedulingv1beta1.PodGroup{}); err != nil {
		t.Fatalf("the recreated PodGroup was deleted again: %v", err)
	}
}

// The claim comes with the gang's first pod, whenever the operator would
// write status, and only once.
func TestReadyEarlyClaimsAtFirstPod(t *testing.T) {
	ctx := context.Background()
	gc := &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	c, base := wrapped(t, ReadyEarly, gc)
	if err := c.Create(ctx, gangPod("a", "a-head")); err != nil {
		t.Fatal(err)
	}
	got := &gpulabv1alpha1.GPUCluster{}
	if err := base.Get(ctx, client.ObjectKeyFromObject(gc), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != gpulabv1alpha1.ClusterReady || !meta.IsStatusConditionTrue(got.Status.Conditions, gpulabv1alpha1.ConditionReady) {
		t.Errorf("after the first pod, status is %+v; want the false Ready claim", got.Status)
	}
	rv := got.ResourceVersion
	if err := c.Create(ctx, gangPod("a", "a-worker-0")); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(gc), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != rv {
		t.Error("the second pod claimed Ready again; the fault strikes once per gang")
	}
}

func TestReadyEarly(t *testing.T) {
	ctx := context.Background()
	gc := &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	c, base := wrapped(t, ReadyEarly, gc)
	for phase, want := range map[gpulabv1alpha1.ClusterPhase]gpulabv1alpha1.ClusterPhase{
		gpulabv1alpha1.ClusterScheduling:    gpulabv1alpha1.ClusterReady,
		gpulabv1alpha1.ClusterProvisioning:  gpulabv1alpha1.ClusterReady,
		gpulabv1alpha1.ClusterUnschedulable: gpulabv1alpha1.ClusterUnschedulable,
	} {
		cur := &gpulabv1alpha1.GPUCluster{}
		if err := base.Get(ctx, client.ObjectKeyFromObject(gc), cur); err != nil {
			t.Fatal(err)
		}
		cur.Status = gpulabv1alpha1.GPUClusterStatus{Phase: phase, DesiredPods: 3}
		if err := c.Status().Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		got := &gpulabv1alpha1.GPUCluster{}
		if err := base.Get(ctx, client.ObjectKeyFromObject(gc), got); err != nil {
			t.Fatal(err)
		}
		claims := meta.IsStatusConditionTrue(got.Status.Conditions, gpulabv1alpha1.ConditionReady)
		if got.Status.Phase != want || claims != (want == gpulabv1alpha1.ClusterReady) {
			t.Errorf("status written as %s became phase %s, Ready=%v; want %s", phase, got.Status.Phase, claims, want)
		}
	}
}

// SlowPodCreate waits before pod creates only: with the context already
// cancelled a pod create gives up uncreated while a PodGroup is created.
func TestSlowPodCreate(t *testing.T) {
	t.Setenv(DelayEnvVar, "1h")
	c, base := wrapped(t, SlowPodCreate)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Create(ctx, gangPod("a", "a-head")); !errors.Is(err, context.Canceled) {
		t.Fatalf("pod create with a cancelled wait: %v, want context.Canceled", err)
	}
	if err := base.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "a-head"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod was created despite the cancelled wait: %v", err)
	}
	if err := c.Create(ctx, podGroup("a")); err != nil {
		t.Errorf("PodGroup create waited: %v", err)
	}
	t.Setenv(DelayEnvVar, "soon")
	if _, err := NewClientFunc(SlowPodCreate); err == nil || !strings.Contains(err.Error(), DelayEnvVar) {
		t.Errorf("a bad delay: %v, want an error naming %s", err, DelayEnvVar)
	}
}
