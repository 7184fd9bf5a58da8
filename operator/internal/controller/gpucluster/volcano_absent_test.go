package gpucluster_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/manager"
	"github.com/gpulab/gpulab/operator/internal/metrics"
	"github.com/gpulab/gpulab/operator/internal/testutil"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestWithoutVolcano: on an API server without Volcano's CRDs and without
// the GenericWorkload gate the operator starts, reports VolcanoNotInstalled
// for volcano clusters and WorkloadAPINotServed for kubernetes clusters
// without creating pods, and runs scheduler: default clusters.
func TestWithoutVolcano(t *testing.T) {
	needEnv(t)
	bare := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{filepath.Join("..", "..", "..", "config", "crd", "bases")}})
	c := bare.Client
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := manager.New(ctx, bare.Config, manager.Options{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", SkipNameValidation: true,
		Metrics: metrics.NewClusters(prometheus.NewRegistry()),
	})
	if err != nil {
		cancel()
		t.Fatalf("the operator must start without Volcano: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager: %v", err)
		}
	})

	ns := testutil.NewNamespace(t, c)
	gang := testutil.NewCluster(ns, "gang", 1, 1)
	gang.Spec.WorkerGroups[0].GPUs = nil
	if err := c.Create(ctx, gang); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "VolcanoNotInstalled", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "gang")
		cond := meta.FindStatusCondition(got.Status.Conditions, gpulabv1alpha1.ConditionGangScheduled)
		return cond != nil && cond.Reason == gpulabv1alpha1.ReasonVolcanoNotInstalled && got.Status.Phase == gpulabv1alpha1.ClusterFailed,
			fmt.Sprintf("phase %s, %+v", got.Status.Phase, cond)
	})
	if n := len(testutil.ListPods(t, c, ns)); n != 0 {
		t.Errorf("%d pods created without a gang", n)
	}

	native := testutil.NewCluster(ns, "native", 1, 1)
	native.Spec.WorkerGroups[0].GPUs = nil
	native.Spec.Scheduling.Scheduler = gpulabv1alpha1.SchedulerKubernetes
	if err := c.Create(ctx, native); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "WorkloadAPINotServed", func() (bool, string) {
		got := testutil.GetCluster(t, c, ns, "native")
		cond := meta.FindStatusCondition(got.Status.Conditions, gpulabv1alpha1.ConditionGangScheduled)
		return cond != nil && cond.Reason == gpulabv1alpha1.ReasonWorkloadAPINotServed && strings.Contains(cond.Message, "GenericWorkload") &&
				got.Status.Phase == gpulabv1alpha1.ClusterFailed,
			fmt.Sprintf("phase %s, %+v", got.Status.Phase, cond)
	})
	if n := len(testutil.ListPods(t, c, ns)); n != 0 {
		t.Errorf("%d pods created without a gang", n)
	}

	plain := testutil.NewCluster(ns, "plain", 2, 1)
	plain.Spec.WorkerGroups[0].GPUs = nil
	plain.Spec.Scheduling.Scheduler = gpulabv1alpha1.SchedulerDefault
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "default-scheduler pods", func() (bool, string) {
		var n int
		for _, p := range testutil.ListPods(t, c, ns) {
			if p.Labels[gpulabv1alpha1.ClusterLabel] == "plain" {
				n++
				if p.Spec.SchedulerName == "volcano" || p.Annotations["scheduling.k8s.io/group-name"] != "" {
					return false, fmt.Sprintf("pod %s is set up for Volcano", p.Name)
				}
			}
		}
		return n == 3, fmt.Sprintf("%d pods", n)
	})
}
