package gpucluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// recordingQueue records how long each Add waits.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	waits []time.Duration
}

func (q *recordingQueue) Add(reconcile.Request) { q.waits = append(q.waits, 0) }
func (q *recordingQueue) AddAfter(_ reconcile.Request, d time.Duration) {
	q.waits = append(q.waits, d)
}

// TestChildCreationWaitsForTheFirstStatus: a child's creation wakes its
// cluster after the status coalescing window, so the reconcile after the
// cluster's own creates is the one that writes its deferred first status;
// updates wake it after the short batch, deletions at once.
func TestChildCreationWaitsForTheFirstStatus(t *testing.T) {
	scheme := k8sruntime.NewScheme()
	if err := gpulabv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gvk := gpulabv1alpha1.GroupVersion.WithKind("GPUCluster")
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(gvk, meta.RESTScopeNamespace)
	truth := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-head", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: "c", UID: "u", Controller: &truth}}}}

	const window = 1500 * time.Millisecond
	h := ownerHandler(scheme, mapper, window)
	q := &recordingQueue{}
	ctx := context.Background()
	h.Create(ctx, event.CreateEvent{Object: pod}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod, ObjectNew: pod}, q)
	h.Delete(ctx, event.DeleteEvent{Object: pod}, q)
	want := []time.Duration{window, childEventBatch, 0}
	if len(q.waits) != len(want) {
		t.Fatalf("waits %v, want %v", q.waits, want)
	}
	for i := range want {
		if q.waits[i] != want[i] {
			t.Errorf("waits %v, want %v (create, update, delete)", q.waits, want)
			break
		}
	}
}
