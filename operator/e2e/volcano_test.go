package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/manager"
	"github.com/gpulab/gpulab/operator/internal/metrics"
	"github.com/gpulab/gpulab/operator/internal/testutil"
	"github.com/gpulab/gpulab/testbeds/local"
	"github.com/gpulab/gpulab/testbeds/local/localtest"
)

const (
	h100    = "NVIDIA-H100-80GB-HBM3"
	a100    = "NVIDIA-A100-SXM4-40GB"
	timeout = 90 * time.Second
)

// TestOperatorOnVolcano runs the operator in-process against the local
// testbed (2 H100 and 2 A100 nodes) and checks what only a real scheduler
// and garbage collector can show.
func TestOperatorOnVolcano(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fleet, err := local.ParseFleet("dgx-h100=2,dgx-a100=2")
	if err != nil {
		t.Fatal(err)
	}
	tb := localtest.Start(t, local.Options{Name: "gpulab-operator-e2e", Fleet: fleet})
	traffic := testutil.NewTraffic()
	c := startOperator(t, tb, manager.Options{}, func(cfg *rest.Config) { cfg.Wrap(traffic.Wrap) })

	t.Run("a cluster reaches Ready through Volcano on its product's nodes", func(t *testing.T) {
		ns := namespace(t, c, "ready")
		before := reconciles(t)
		writesBefore := traffic.Snapshot()
		if err := c.Create(ctx, cluster(ns, "llm", 2, h100)); err != nil {
			t.Fatal(err)
		}
		got := waitPhase(t, c, ns, "llm", gpulabv1alpha1.ClusterReady)
		if got.Status.ScheduledTime == nil || got.Status.ReadyTime == nil || got.Status.ReadyPods != 3 || got.Status.PodGroup == nil {
			t.Errorf("status %+v", got.Status)
		}
		// Volcano moves its PodGroup to Running on its own schedule (v1.14
		// may do it after the pods are Ready). A Ready cluster's status
		// leaves the phase out, so that costs no status write.
		if got.Status.PodGroup != nil && got.Status.PodGroup.Phase != "" {
			t.Errorf("a Ready cluster's status.podGroup.phase is %q, want empty", got.Status.PodGroup.Phase)
		}
		poll(t, "the PodGroup Running", func() (bool, string) {
			pg := &schedulingv1beta1.PodGroup{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "llm-pg"}, pg); err != nil {
				return false, err.Error()
			}
			return pg.Status.Phase == schedulingv1beta1.PodGroupRunning, fmt.Sprintf("PodGroup phase %s", pg.Status.Phase)
		})
		if now := getCluster(t, c, ns, "llm"); now.ResourceVersion != got.ResourceVersion {
			t.Errorf("the cluster changed after Ready (resourceVersion %s → %s): status %+v", got.ResourceVersion, now.ResourceVersion, now.Status)
		}
		for _, p := range pods(t, c, ns) {
			if p.Labels[gpulabv1alpha1.GroupLabel] == "workers" && !strings.HasPrefix(p.Spec.NodeName, "dgx-h100-") {
				t.Errorf("worker %s landed on %s, not an H100 node", p.Name, p.Spec.NodeName)
			}
		}
		writes := diff(traffic.Snapshot(), writesBefore)
		t.Logf("to Ready: %d reconciles; API writes %v; status codes %v", reconciles(t)-before, writes, traffic.StatusCodes())
		deleteCluster(t, c, ns, "llm")
	})

	t.Run("suspend frees the queue for a waiting gang, resume recreates", func(t *testing.T) {
		ns := namespace(t, c, "suspend")
		if err := c.Create(ctx, cluster(ns, "first", 2, a100)); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, c, ns, "first", gpulabv1alpha1.ClusterReady)
		// Both A100 nodes are taken: the second gang fits the fleet but must wait.
		if err := c.Create(ctx, cluster(ns, "second", 1, a100)); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, c, ns, "second", gpulabv1alpha1.ClusterScheduling)
		for _, p := range pods(t, c, ns) {
			if p.Labels[gpulabv1alpha1.ClusterLabel] == "second" && p.Spec.NodeName != "" && p.Labels[gpulabv1alpha1.GroupLabel] == "workers" {
				t.Fatalf("second's worker %s bound to %s while the A100s are full", p.Name, p.Spec.NodeName)
			}
		}
		setSuspend(t, c, ns, "first", true)
		waitPhase(t, c, ns, "second", gpulabv1alpha1.ClusterReady)
		waitGone(t, c, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "first-pg"}})
		if got := getCluster(t, c, ns, "first"); got.Status.Phase != gpulabv1alpha1.ClusterSuspended {
			t.Errorf("first is %s, want Suspended", got.Status.Phase)
		}
		// Resume: first waits for second's A100 node, then binds when second goes.
		setSuspend(t, c, ns, "first", false)
		waitPhase(t, c, ns, "first", gpulabv1alpha1.ClusterScheduling)
		if err := c.Delete(ctx, &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "second"}}); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, c, ns, "first", gpulabv1alpha1.ClusterReady)
		deleteCluster(t, c, ns, "first")
	})

	t.Run("GPUJobs on a queue that fits one gang run back to back", func(t *testing.T) {
		ns := namespace(t, c, "jobs")
		queue := &schedulingv1beta1.Queue{
			ObjectMeta: metav1.ObjectMeta{Name: "one-gang"},
			Spec: schedulingv1beta1.QueueSpec{Weight: 1, Reclaimable: new(true),
				Capability: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("16")}},
		}
		if err := c.Create(ctx, queue); err != nil {
			t.Fatal(err)
		}
		poll(t, "queue Open", func() (bool, string) {
			err := c.Get(ctx, client.ObjectKeyFromObject(queue), queue)
			return err == nil && queue.Status.State == schedulingv1beta1.QueueStateOpen, string(queue.Status.State)
		})
		for _, name := range []string{"first", "second"} {
			if err := c.Create(ctx, gpuJob(ns, name, "one-gang", false)); err != nil {
				t.Fatal(err)
			}
		}
		first := waitJob(t, c, ns, "first", gpulabv1alpha1.JobSucceeded)
		second := waitJob(t, c, ns, "second", gpulabv1alpha1.JobSucceeded)
		if first.Status.ClusterReadyTime == nil || second.Status.ClusterReadyTime == nil {
			t.Fatalf("a succeeded job without a cluster-ready time: %+v, %+v", first.Status, second.Status)
		}
		// Volcano may bind either gang first; the other must wait for it.
		if second.Status.ClusterReadyTime.Before(first.Status.ClusterReadyTime) {
			first, second = second, first
		}
		if first.Status.CompletionTime == nil || second.Status.ClusterReadyTime.Before(first.Status.CompletionTime) {
			t.Fatalf("the gang of %s was Ready (%v) before %s finished (%v): the queue fits one gang", second.Name, second.Status.ClusterReadyTime, first.Name, first.Status.CompletionTime)
		}
		t.Logf("first job finished → second gang Ready: %s", second.Status.ClusterReadyTime.Sub(first.Status.CompletionTime.Time))
		waitGone(t, c, &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: first.Status.ClusterName}})

		if err := c.Create(ctx, gpuJob(ns, "failing", "default", true)); err != nil {
			t.Fatal(err)
		}
		failed := waitJob(t, c, ns, "failing", gpulabv1alpha1.JobFailed)
		if failed.Status.Attempts != 2 || failed.Status.Failures != 2 {
			t.Errorf("failing job: %d attempts, %d failures, want 2 and 2", failed.Status.Attempts, failed.Status.Failures)
		}
	})

	t.Run("deleting a cluster removes its pods, Service and PodGroup", func(t *testing.T) {
		ns := namespace(t, c, "delete")
		// CPU-only: the earlier subtests hold the GPUs.
		if err := c.Create(ctx, cluster(ns, "gone", 1, "")); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, c, ns, "gone", gpulabv1alpha1.ClusterReady)
		if err := c.Delete(ctx, &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, c, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-pg"}})
		waitGone(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-head"}})
		poll(t, "pods deleted", func() (bool, string) {
			n := len(pods(t, c, ns))
			return n == 0, fmt.Sprintf("%d pods left", n)
		})
	})
}

// startOperator runs the operator in-process against the testbed until the
// test ends (its gpulab_ metrics in registries of their own, so several can
// run in one process), after tune adjusts the client config. It returns an
// admin client of the testbed.
func startOperator(t *testing.T, tb *local.Testbed, opts manager.Options, tune func(*rest.Config)) client.Client {
	t.Helper()
	c, err := tb.Client()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", tb.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(cfg)
	}
	opts.MetricsBindAddress, opts.HealthProbeBindAddress = "0", "0"
	opts.Metrics, opts.JobMetrics = metrics.NewClusters(prometheus.NewRegistry()), metrics.NewJobs(prometheus.NewRegistry())
	opts.SkipNameValidation = true
	ctx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
	mgr, err := manager.New(ctx, cfg, opts)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager: %v", err)
		}
	})
	return c
}

// gpuJob runs a submitter on its own cluster of 2 H100 workers (16 GPUs) in
// queue; the submitter fails (kwok's gpulab-pod-fail stage) when fail is set,
// and is retried once.
func gpuJob(ns, name, queue string, fail bool) *gpulabv1alpha1.GPUJob {
	spec := cluster(ns, name, 2, h100).Spec
	if fail {
		spec = cluster(ns, name, 1, "").Spec
	}
	spec.Scheduling.Queue = queue
	submitter := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "submit", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if fail {
		submitter.Labels["gpulab.io/simulate-result"] = "fail"
	}
	return &gpulabv1alpha1.GPUJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       gpulabv1alpha1.GPUJobSpec{ClusterTemplate: &spec, Submitter: submitter, BackoffLimit: new(int32(1))},
	}
}

func waitJob(t *testing.T, c client.Client, ns, name string, phase gpulabv1alpha1.JobPhase) *gpulabv1alpha1.GPUJob {
	t.Helper()
	j := &gpulabv1alpha1.GPUJob{}
	poll(t, fmt.Sprintf("GPUJob %s %s", name, phase), func() (bool, string) {
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, j); err != nil {
			return false, err.Error()
		}
		return j.Status.Phase == phase, fmt.Sprintf("phase %q, %+v", j.Status.Phase, j.Status.Conditions)
	})
	return j
}

func deleteCluster(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Delete(t.Context(), &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	poll(t, "pods of "+name+" gone", func() (bool, string) {
		n := 0
		for _, p := range pods(t, c, ns) {
			if p.Labels[gpulabv1alpha1.ClusterLabel] == name {
				n++
			}
		}
		return n == 0, fmt.Sprintf("%d pods left", n)
	})
}

// cluster is a head and workers with 8 GPUs of product each (none when
// product is empty).
func cluster(ns, name string, workers int32, product string) *gpulabv1alpha1.GPUCluster {
	tmpl := func(container string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: container, Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
		}}}}
	}
	gc := &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Head:         gpulabv1alpha1.HeadSpec{Template: tmpl("head")},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "workers", Replicas: workers, Template: tmpl("worker")}},
		},
	}
	if product != "" {
		gc.Spec.WorkerGroups[0].GPUs = &gpulabv1alpha1.GPURequest{PerPod: new(int32(8)), Product: product}
	}
	return gc
}

func namespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func poll(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

func getCluster(t *testing.T, c client.Client, ns, name string) *gpulabv1alpha1.GPUCluster {
	t.Helper()
	gc := &gpulabv1alpha1.GPUCluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, gc); err != nil {
		t.Fatal(err)
	}
	return gc
}

func waitPhase(t *testing.T, c client.Client, ns, name string, phase gpulabv1alpha1.ClusterPhase) *gpulabv1alpha1.GPUCluster {
	t.Helper()
	var got *gpulabv1alpha1.GPUCluster
	poll(t, fmt.Sprintf("%s/%s %s", ns, name, phase), func() (bool, string) {
		got = getCluster(t, c, ns, name)
		return got.Status.Phase == phase, fmt.Sprintf("phase %q, conditions %+v", got.Status.Phase, got.Status.Conditions)
	})
	return got
}

func waitGone(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	poll(t, fmt.Sprintf("%T %s deleted", obj, obj.GetName()), func() (bool, string) {
		err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

func setSuspend(t *testing.T, c client.Client, ns, name string, suspend bool) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gc := getCluster(t, c, ns, name)
		gc.Spec.Suspend = suspend
		return c.Update(t.Context(), gc)
	}); err != nil {
		t.Fatal(err)
	}
}

func pods(t *testing.T, c client.Client, ns string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// reconciles reads controller-runtime's reconcile counter for the controller.
func reconciles(t *testing.T) int {
	t.Helper()
	return counter(t, "controller_runtime_reconcile_total", "gpucluster")
}

// counter sums a controller-runtime counter over one controller's series.
func counter(t *testing.T, name, controller string) int {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "controller") == controller {
				total += int(m.GetCounter().GetValue())
			}
		}
	}
	return total
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func diff(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
