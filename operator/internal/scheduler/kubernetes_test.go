package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	k8sscheduling "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gang/sizing"
	"github.com/gpulab/gpulab/operator/internal/ownership"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gpulabv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func nativeCluster() *gpulabv1alpha1.GPUCluster {
	return &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gang", UID: "uid-gang"},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Scheduling:   gpulabv1alpha1.SchedulingSpec{Scheduler: gpulabv1alpha1.SchedulerKubernetes, Queue: "default"},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "workers", Replicas: 2}},
		},
	}
}

func gangOf(head, workers, workerMin int32) sizing.GangSize {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}
	return sizing.ForMembers([]sizing.Member{
		{Task: gpulabv1alpha1.HeadGroupName, Pod: pod, Min: head, Count: head},
		{Task: "workers", Pod: pod, Min: workerMin, Count: workers},
	})
}

func getPodGroup(t *testing.T, c client.Client) *k8sscheduling.PodGroup {
	t.Helper()
	pg := &k8sscheduling.PodGroup{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "gang-pg"}, pg); err != nil {
		t.Fatalf("reading the PodGroup: %v", err)
	}
	return pg
}

// TestKubernetesEnsure: the PodGroup is created controlled by the cluster
// with a gang policy whose minCount is minMember; minCount follows the
// gang in place; an unchanged gang writes nothing.
func TestKubernetesEnsure(t *testing.T) {
	ctx := context.Background()
	cluster := nativeCluster()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()

	st, changed, err := Kubernetes{}.Ensure(ctx, c, cluster, gangOf(1, 2, 2))
	if err != nil || !changed {
		t.Fatalf("Ensure = %v, %v; want created", changed, err)
	}
	pg := getPodGroup(t, c)
	if g := pg.Spec.SchedulingPolicy.Gang; g == nil || g.MinCount != 3 || pg.Spec.SchedulingPolicy.Basic != nil {
		t.Errorf("schedulingPolicy = %+v, want gang minCount 3", pg.Spec.SchedulingPolicy)
	}
	if !metav1.IsControlledBy(pg, cluster) || pg.Labels[gpulabv1alpha1.ClusterLabel] != "gang" {
		t.Errorf("PodGroup owner %v labels %v, want controlled by the cluster and labelled", pg.OwnerReferences, pg.Labels)
	}
	if st.Name != "gang-pg" || st.MinMember != 3 || st.APIVersion != "scheduling.k8s.io/v1beta1" || st.Phase != NativePhasePending || st.MinResources != nil || st.MinTaskMember != nil {
		t.Errorf("status %+v", st)
	}

	if _, changed, err := (Kubernetes{}).Ensure(ctx, c, cluster, gangOf(1, 2, 2)); err != nil || changed {
		t.Errorf("Ensure of an unchanged gang = %v, %v; want no write", changed, err)
	}
	rv := getPodGroup(t, c).ResourceVersion

	if _, changed, err := (Kubernetes{}).Ensure(ctx, c, cluster, gangOf(1, 4, 4)); err != nil || !changed {
		t.Fatalf("Ensure after a resize = %v, %v; want updated", changed, err)
	}
	pg = getPodGroup(t, c)
	if pg.Spec.SchedulingPolicy.Gang.MinCount != 5 || pg.ResourceVersion == rv {
		t.Errorf("minCount = %d, want 5 (updated in place)", pg.Spec.SchedulingPolicy.Gang.MinCount)
	}

	pg.Status.Conditions = []metav1.Condition{{Type: k8sscheduling.PodGroupInitiallyScheduled, Status: metav1.ConditionFalse, Reason: k8sscheduling.PodGroupReasonUnschedulable}}
	if st := observedNative(pg); st.Phase != "Unschedulable" {
		t.Errorf("phase %q, want Unschedulable", st.Phase)
	}
	pg.Status.Conditions[0].Status = metav1.ConditionTrue
	if st := observedNative(pg); st.Phase != NativePhaseScheduled {
		t.Errorf("phase %q, want Scheduled", st.Phase)
	}
}

// TestKubernetesForeignPodGroup: a PodGroup under the cluster's name that
// someone else controls (or nobody) is neither updated nor deleted.
func TestKubernetesForeignPodGroup(t *testing.T) {
	ctx := context.Background()
	for name, refs := range map[string][]metav1.OwnerReference{
		"no controller": nil,
		"a Job's":       {{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "uid-job", Controller: new(true)}},
	} {
		t.Run(name, func(t *testing.T) {
			foreign := &k8sscheduling.PodGroup{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gang-pg", OwnerReferences: refs},
				Spec:       k8sscheduling.PodGroupSpec{SchedulingPolicy: k8sscheduling.PodGroupSchedulingPolicy{Gang: &k8sscheduling.GangSchedulingPolicy{MinCount: 7}}},
			}
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(foreign).Build()
			_, changed, err := Kubernetes{}.Ensure(ctx, c, nativeCluster(), gangOf(1, 2, 2))
			if !ownership.IsConflict(err) || changed {
				t.Errorf("Ensure = %v, %v; want a conflict and no write", changed, err)
			}
			if err := (Kubernetes{}).Release(ctx, c, nativeCluster()); !ownership.IsConflict(err) {
				t.Errorf("Release = %v, want a conflict", err)
			}
			if pg := getPodGroup(t, c); pg.Spec.SchedulingPolicy.Gang.MinCount != 7 || !pg.DeletionTimestamp.IsZero() {
				t.Errorf("the foreign PodGroup was touched: %+v", pg)
			}
		})
	}
}

// TestKubernetesReleaseAndReplace: Release deletes the cluster's PodGroup;
// while it is being deleted (its protection finalizer held until no pod
// uses it) Ensure creates no new one and says to wait; a changed priority
// class, immutable on the PodGroup, replaces it the same way.
func TestKubernetesReleaseAndReplace(t *testing.T) {
	ctx := context.Background()
	cluster := nativeCluster()
	cluster.Spec.Scheduling.PriorityClassName = "low"
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	if _, _, err := (Kubernetes{}).Ensure(ctx, c, cluster, gangOf(1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	pg := getPodGroup(t, c)
	if pg.Spec.PriorityClassName != "low" {
		t.Errorf("priorityClassName %q, want low", pg.Spec.PriorityClassName)
	}
	// As the PodGroupProtection admission plugin does.
	pg.Finalizers = []string{"scheduling.k8s.io/podgroup-protection"}
	if err := c.Update(ctx, pg); err != nil {
		t.Fatal(err)
	}

	if err := (Kubernetes{}).Release(ctx, c, cluster); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if pg := getPodGroup(t, c); pg.DeletionTimestamp.IsZero() {
		t.Fatal("Release did not delete the PodGroup")
	}
	if err := (Kubernetes{}).Release(ctx, c, cluster); err != nil {
		t.Errorf("Release of a PodGroup being deleted: %v", err)
	}
	if _, _, err := (Kubernetes{}).Ensure(ctx, c, cluster, gangOf(1, 2, 2)); !errors.Is(err, ErrReleasing) {
		t.Errorf("Ensure while the PodGroup is being deleted = %v, want ErrReleasing", err)
	}
	finish := func() {
		pg := getPodGroup(t, c)
		pg.Finalizers = nil
		if err := c.Update(ctx, pg); err != nil {
			t.Fatal(err)
		}
	}
	finish()
	if _, changed, err := (Kubernetes{}).Ensure(ctx, c, cluster, gangOf(1, 2, 2)); err != nil || !changed {
		t.Fatalf("Ensure once it is gone = %v, %v; want created", changed, err)
	}

	cluster.Spec.Scheduling.PriorityClassName = "high"
	old := getPodGroup(t, c)
	old.Finalizers = []string{"scheduling.k8s.io/podgroup-protection"}
	if err := c.Update(ctx, old); err != nil {
		t.Fatal(err)
	}
	_, _, err := Kubernetes{}.Ensure(ctx, c, cluster, gangOf(1, 2, 2))
	if !errors.Is(err, ErrReleasing) || !strings.Contains(err.Error(), "priorityClassName") {
		t.Errorf("Ensure after a priority class change = %v, want ErrReleasing naming priorityClassName", err)
	}
	finish()
	if _, _, err := (Kubernetes{}).Ensure(ctx, c, cluster, gangOf(1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	if pg := getPodGroup(t, c); pg.Spec.PriorityClassName != "high" {
		t.Errorf("PodGroup priorityClassName %q, want a new one with high", pg.Spec.PriorityClassName)
	}

	// No priority class asked: the one admission filled in is kept.
	cluster.Spec.Scheduling.PriorityClassName = ""
	if _, changed, err := (Kubernetes{}).Ensure(ctx, c, cluster, gangOf(1, 2, 2)); err != nil || changed {
		t.Errorf("Ensure without a priority class = %v, %v; want the PodGroup kept", changed, err)
	}
}

// TestKubernetesNotServed: without the GenericWorkload gate the kind is not
// served; Ensure says so for status, Release has nothing to do.
func TestKubernetesNotServed(t *testing.T) {
	ctx := context.Background()
	noMatch := &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "scheduling.k8s.io", Kind: "PodGroup"}, SearchedVersions: []string{"v1beta1"}}
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(testScheme(t)).Build(), interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return noMatch
		},
	})
	_, _, err := Kubernetes{}.Ensure(ctx, c, nativeCluster(), gangOf(1, 2, 2))
	var notServed *NotServedError
	if !errors.Is(err, ErrNotInstalled) || !errors.As(err, &notServed) || notServed.Reason != gpulabv1alpha1.ReasonWorkloadAPINotServed ||
		!strings.Contains(notServed.Message, "GenericWorkload") {
		t.Errorf("Ensure = %v, want a NotServedError with reason WorkloadAPINotServed naming the gate", err)
	}
	if err := (Kubernetes{}).Release(ctx, c, nativeCluster()); err != nil {
		t.Errorf("Release = %v, want nothing to do", err)
	}
	// Discovery lists the version, its storage is off: the create's 404.
	c = interceptor.NewClient(fake.NewClientBuilder().WithScheme(testScheme(t)).Build(), interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewNotFound(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "podgroups"}, "")
		},
	})
	if _, _, err := (Kubernetes{}).Ensure(ctx, c, nativeCluster(), gangOf(1, 2, 2)); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Ensure with the storage off = %v, want ErrNotInstalled", err)
	}
}

// TestCoverage: what each backend's gang object cannot carry is named.
func TestCoverage(t *testing.T) {
	cluster := nativeCluster()
	if c := (Volcano{}).Coverage(cluster, gangOf(1, 4, 2)); !c.Complete || c.Reason != gpulabv1alpha1.ReasonGangPolicyExpressed {
		t.Errorf("volcano: %+v, want complete", c)
	}
	if c := For(gpulabv1alpha1.SchedulerDefault).Coverage(cluster, gangOf(1, 4, 4)); c.Complete || c.Reason != gpulabv1alpha1.ReasonNoGang {
		t.Errorf("default: %+v, want NoGang", c)
	}

	full := Kubernetes{}.Coverage(cluster, gangOf(1, 4, 4))
	if full.Complete || full.Reason != gpulabv1alpha1.ReasonGangPolicyPartial || !strings.Contains(full.Message, "minResources") ||
		strings.Contains(full.Message, "minTaskMember") {
		t.Errorf("kubernetes, every pod needed: %+v, want partial for minResources only", full)
	}
	elastic := Kubernetes{}.Coverage(cluster, gangOf(1, 4, 2))
	if elastic.Complete || !strings.Contains(elastic.Message, "minTaskMember {head:1, workers:2}") || !strings.Contains(elastic.Message, "any 3 of") {
		t.Errorf("kubernetes, elastic workers: %+v, want minTaskMember named", elastic)
	}
	bare := sizing.ForMembers([]sizing.Member{{Task: "head", Pod: &corev1.Pod{}, Min: 1}, {Task: "w", Pod: &corev1.Pod{}, Min: 2, Count: 2}})
	if c := (Kubernetes{}).Coverage(cluster, bare); !c.Complete || c.Reason != gpulabv1alpha1.ReasonGangPolicyExpressed {
		t.Errorf("kubernetes, no requests and every pod needed: %+v, want complete", c)
	}
}
