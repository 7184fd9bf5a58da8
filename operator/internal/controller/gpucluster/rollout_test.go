package gpucluster_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// TestSpecChangeRecreatesTheGang changes a Ready cluster's worker template:
// every pod is replaced by one built from the new spec, old and new pods
// never run side by side, and status never calls the new generation Ready
// while old pods serve it. Scaling afterwards keeps the pods it has.
func TestSpecChangeRecreatesTheGang(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})
	if err := c.Create(ctx, testutil.NewCluster(ns, "roll", 2, 4)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "roll")
	old := podUIDs(t, c, ns)

	var gen int64
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gc := testutil.GetCluster(t, c, ns, "roll")
		gc.Spec.WorkerGroups[0].Template.Spec.Containers[0].Image = "registry.k8s.io/pause:3.11"
		err := c.Update(ctx, gc)
		gen = gc.Generation
		return err
	}); err != nil {
		t.Fatal(err)
	}

	testutil.Eventually(t, waitTimeout, "every pod rebuilt from the new spec", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		var oldLive, newLive []string
		for _, p := range testutil.ListPods(t, c, ns) {
			if !p.DeletionTimestamp.IsZero() {
				continue
			}
			if _, ok := old[p.Name]; ok && old[p.Name] == p.UID {
				oldLive = append(oldLive, p.Name)
			} else {
				newLive = append(newLive, p.Name)
			}
		}
		if len(oldLive) > 0 && len(newLive) > 0 {
			t.Fatalf("old pods %v and new pods %v live side by side: the gang was not recreated as a whole", oldLive, newLive)
		}
		gc := testutil.GetCluster(t, c, ns, "roll")
		if gc.Status.ObservedGeneration >= gen && gc.Status.Phase == gpulabv1alpha1.ClusterReady && len(oldLive) > 0 {
			t.Fatalf("status says generation %d is Ready while old pods %v run the previous template", gc.Status.ObservedGeneration, oldLive)
		}
		return len(newLive) == 3 && gc.Status.Phase == gpulabv1alpha1.ClusterReady && gc.Status.ObservedGeneration >= gen,
			fmt.Sprintf("old %v, new %v, phase %s", oldLive, newLive, gc.Status.Phase)
	})
	for _, p := range testutil.ListPods(t, c, ns) {
		if p.Labels[gpulabv1alpha1.GroupLabel] == "workers" && p.Spec.Containers[0].Image != "registry.k8s.io/pause:3.11" {
			t.Errorf("pod %s runs %s after the change", p.Name, p.Spec.Containers[0].Image)
		}
	}

	// Scaling is not a template change: the pods there stay.
	before := podUIDs(t, c, ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gc := testutil.GetCluster(t, c, ns, "roll")
		gc.Spec.WorkerGroups[0].Replicas = 3
		return c.Update(ctx, gc)
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the scaled-up pod", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		return len(podUIDs(t, c, ns)) == 4, "waiting for roll-workers-2"
	})
	after := podUIDs(t, c, ns)
	for name, uid := range before {
		if after[name] != uid {
			t.Errorf("scaling up replaced pod %s", name)
		}
	}
}

func waitReady(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, name+" Ready", func() (bool, string) {
		testutil.PlayKubelet(t, c, ns)
		gc := testutil.GetCluster(t, c, ns, name)
		return gc.Status.Phase == gpulabv1alpha1.ClusterReady, string(gc.Status.Phase)
	})
}

// podUIDs maps the namespace's live pods to their UIDs.
func podUIDs(t *testing.T, c client.Client, ns string) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for _, p := range testutil.ListPods(t, c, ns) {
		if p.DeletionTimestamp.IsZero() && p.Status.Phase != corev1.PodFailed {
			out[p.Name] = p.UID
		}
	}
	return out
}
