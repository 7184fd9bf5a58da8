package gpucluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/metrics"
	"github.com/gpulab/gpulab/operator/internal/scheduler"
)

// TestStatusRecordsAFailedRead: a reconcile whose reads failed (capacity,
// overheads, pods) observed nothing, so status keeps what it knew (not
// zero pods, not a new phase), and says why on ReconcileSucceeded; once a
// reconcile succeeds again the condition turns True.
func TestStatusRecordsAFailedRead(t *testing.T) {
	c := testCluster(2)
	c.Generation = 3
	old := gpulabv1alpha1.GPUClusterStatus{Phase: gpulabv1alpha1.ClusterReady, ObservedGeneration: 3, ReadyPods: 3, DesiredPods: 3,
		Conditions: []metav1.Condition{{Type: gpulabv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: gpulabv1alpha1.ReasonPodsReady}}}
	now := metav1.Now()

	failed := computeStatus(&scope{cluster: c, reconcileErr: errors.New("listing nodes: connection refused")}, &old, now)
	if failed.Phase != gpulabv1alpha1.ClusterReady || failed.ReadyPods != 3 || !meta.IsStatusConditionTrue(failed.Conditions, gpulabv1alpha1.ConditionReady) {
		t.Errorf("a reconcile that observed nothing changed what status knew: %+v", failed)
	}
	cond := meta.FindStatusCondition(failed.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != gpulabv1alpha1.ReasonReconcileError || cond.Message != "listing nodes: connection refused" {
		t.Errorf("ReconcileSucceeded = %+v, want False/ReconcileError with the error", cond)
	}

	// Pods were read (none exist yet), capacity was not: still no observation.
	if got := computeStatus(&scope{cluster: c, podsListed: true, reconcileErr: errors.New("x")}, &old, now); got.ReadyPods != 3 {
		t.Errorf("status counted pods without a desired state: %+v", got)
	}

	s := &scope{cluster: c, desired: buildDesired(c, fleet(2), nil, scheduler.For(c.Spec.Scheduling.Scheduler), nil), podsListed: true}
	recovered := computeStatus(s, &failed, now)
	if !meta.IsStatusConditionTrue(recovered.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded) {
		t.Errorf("ReconcileSucceeded after a good reconcile: %+v", meta.FindStatusCondition(recovered.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded))
	}
}

// TestStatusOfADeletedClusterIsNoError: a cluster deleted between the
// reconcile's read and its status write has no one left to tell, so the
// write's NotFound is not a reconcile error (at 1,000 gangs' teardown it
// was logged as one 80 times). Other write errors still are.
func TestStatusOfADeletedClusterIsNoError(t *testing.T) {
	s := k8sruntime.NewScheme()
	if err := gpulabv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	gone := testCluster(2)
	gone.Namespace = "ns"
	r := &Reconciler{metrics: metrics.NewClusters(prometheus.NewRegistry()), opts: Options{StatusCoalesce: time.Second}}
	write := func(c client.Client) error {
		r.client, r.apiReader = c, c
		// Past the coalescing window: the status goes out at once.
		r.statusHeld.Store(client.ObjectKeyFromObject(gone), time.Now().Add(-time.Minute))
		return r.updateStatus(context.Background(), &scope{cluster: gone.DeepCopy(), reconcileErr: errors.New("creating pods: forbidden")})
	}
	deleted := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&gpulabv1alpha1.GPUCluster{}).Build()
	if err := write(deleted); err != nil {
		t.Errorf("status write of a deleted cluster: %v, want no error", err)
	}
	refused := interceptor.NewClient(deleted, interceptor.Funcs{SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
		return apierrors.NewServiceUnavailable("etcd is down")
	}})
	if err := write(refused); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("a refused status write: %v, want its error", err)
	}
}

// TestReadyGangNeedsNoPodGroupPhase: the PodGroup's phase explains a gang
// that waits. Once every pod is Ready the status leaves it empty, so
// Volcano moving its PodGroup to Running after the Ready write changes
// nothing the status says and costs no write; a gang that stops being
// Ready shows the phase again.
func TestReadyGangNeedsNoPodGroupPhase(t *testing.T) {
	c := testCluster(2)
	c.Generation = 1
	desired := buildDesired(c, fleet(2), nil, scheduler.For(c.Spec.Scheduling.Scheduler), nil)
	var pods []corev1.Pod
	for _, want := range desired.pods {
		p := *want.DeepCopy()
		p.Spec.NodeName = "node-0"
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		pods = append(pods, p)
	}
	observe := func(phase string, pods []corev1.Pod) *scope {
		return &scope{cluster: c, desired: desired, pods: pods, podsListed: true,
			podGroup: &gpulabv1alpha1.PodGroupStatus{Name: c.Name + "-pg", Phase: phase, MinMember: 3}}
	}
	now := metav1.Now()

	ready := computeStatus(observe("Inqueue", pods), &gpulabv1alpha1.GPUClusterStatus{}, now)
	if ready.Phase != gpulabv1alpha1.ClusterReady || ready.PodGroup == nil || ready.PodGroup.Phase != "" || ready.PodGroup.MinMember != 3 {
		t.Fatalf("a Ready gang's status: phase %s, podGroup %+v; want Ready, the PodGroup without its phase", ready.Phase, ready.PodGroup)
	}
	if later := computeStatus(observe("Running", pods), &ready, now); !equality.Semantic.DeepEqual(later, ready) {
		t.Errorf("the PodGroup reaching Running after Ready changed the status (one more write):\n%+v\n%+v", ready, later)
	}

	notReady := append([]corev1.Pod(nil), pods...)
	notReady[0].Status.Conditions = nil
	if got := computeStatus(observe("Running", notReady), &ready, now); got.Phase == gpulabv1alpha1.ClusterReady || got.PodGroup.Phase != "Running" {
		t.Errorf("a gang no longer Ready: phase %s, podGroup %+v; want the PodGroup's phase Running", got.Phase, got.PodGroup)
	}
}
