package gpucluster_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// TestTerminatingNamespaceStopsCreates: once its terminating namespace
// refuses a create, a cluster creates nothing more. The pods the
// namespace controller deletes one by one then cost one refused create
// and no event, instead of a refused create of every missing pod (and a
// refused event, retried) per deletion. envtest has no namespace
// controller, so the namespace stays Terminating and the test deletes the
// pods itself.
func TestTerminatingNamespaceStopsCreates(t *testing.T) {
	c := needEnv(t)
	ctx := t.Context()
	m := testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	ns := testutil.NewNamespace(t, c)
	pods := createWithPods(t, c, ns, "doomed", 2)
	for i := range pods {
		bind(t, c, &pods[i], fmt.Sprintf("h100-%d", i))
		markReady(t, c, &pods[i])
	}
	testutil.Eventually(t, waitTimeout, "Ready", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "doomed")
		return got.Status.Phase == gpulabv1alpha1.ClusterReady, fmt.Sprintf("phase %q", got.Status.Phase)
	})
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	events := m.Traffic.Count("POST events") + m.Traffic.Refused("POST events")
	for i := range pods {
		if err := c.Delete(ctx, &pods[i], client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		// Status may still be written there: each deletion is seen.
		left := int32(len(pods) - 1 - i)
		testutil.Eventually(t, waitTimeout, fmt.Sprintf("%d Ready pods in status", left), func() (bool, string) {
			got := testutil.GetCluster(t, c, ns, "doomed")
			return got.Status.ReadyPods == left, fmt.Sprintf("readyPods %d", got.Status.ReadyPods)
		})
	}
	if n := m.Traffic.Refused("POST pods"); n != 1 {
		t.Errorf("%d pod creates refused by the terminating namespace, want 1: the first refusal stops the cluster's creates", n)
	}
	if n := m.Traffic.Count("POST pods"); n != 3 {
		t.Errorf("%d pods created, want the 3 from before the namespace was deleted", n)
	}
	if n := m.Traffic.Count("POST events") + m.Traffic.Refused("POST events") - events; n != 0 {
		t.Errorf("%d events sent into the terminating namespace, want none", n)
	}
}
