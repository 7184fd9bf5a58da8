package testutil

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/operator/internal/manager"
	"github.com/gpulab/gpulab/operator/internal/metrics"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// H100 is the product of the nodes CreateGPUNodes registers.
const H100 = "NVIDIA-H100-80GB-HBM3"

// CreateGPUNodes registers n Ready nodes with 8 H100s each, as the device
// plugin and GFD would describe them.
func CreateGPUNodes(ctx context.Context, c client.Client, n int) error {
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("h100-%d", i),
			Labels: map[string]string{gfd.Product: H100, gfd.Memory: "81559"},
		}}
		if err := c.Create(ctx, node); err != nil {
			return err
		}
		node.Status = corev1.NodeStatus{
			Capacity:    corev1.ResourceList{gfd.GPUResource: resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("200"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{gfd.GPUResource: resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("200"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		}
		if err := c.Status().Update(ctx, node); err != nil {
			return err
		}
	}
	return nil
}

// ManagerOptions configures StartManager.
type ManagerOptions struct {
	// LeaderElect turns on leader election (Lease in "default", 3 s).
	LeaderElect bool
	// Traffic counts the manager's API requests; a fresh one by default.
	Traffic *Traffic
	// StatusCoalesce is the operator's (its default when zero).
	StatusCoalesce time.Duration
	// FirstStatusDelay is the operator's; zero means TestFirstStatusDelay,
	// not the operator's 10 s, so that a test waiting for a cluster's
	// first status (Scheduling, Unschedulable) is not held 10 s each.
	FirstStatusDelay time.Duration
}

// TestFirstStatusDelay is the first-status delay of a test's operator:
// short, yet long enough that a gang Ready at once still gets one write.
const TestFirstStatusDelay = time.Second

// Manager is an operator started by a test.
type Manager struct {
	Traffic *Traffic
	Elected <-chan struct{}
	Stop    func()
}

// StartManager starts the operator (every controller) against base; it is
// stopped at cleanup.
func StartManager(t *testing.T, base *rest.Config, o ManagerOptions) *Manager {
	t.Helper()
	if o.Traffic == nil {
		o.Traffic = NewTraffic()
	}
	if o.FirstStatusDelay == 0 {
		o.FirstStatusDelay = TestFirstStatusDelay
	}
	cfg := rest.CopyConfig(base)
	cfg.Wrap(o.Traffic.Wrap)
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := manager.New(ctx, cfg, manager.Options{
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  "0",
		Metrics:                 metrics.NewClusters(prometheus.NewRegistry()),
		JobMetrics:              metrics.NewJobs(prometheus.NewRegistry()),
		SkipNameValidation:      true,
		StatusCoalesce:          o.StatusCoalesce,
		FirstStatusDelay:        o.FirstStatusDelay,
		LeaderElect:             o.LeaderElect,
		LeaderElectionNamespace: "default",
		LeaseDuration:           3 * time.Second,
		RenewDeadline:           2 * time.Second,
		RetryPeriod:             250 * time.Millisecond,
	})
	if err != nil {
		cancel()
		t.Fatalf("manager: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("manager stopped with %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &Manager{Traffic: o.Traffic, Elected: mgr.Elected(), Stop: stop}
}

var nsCounter atomic.Int32

// NewNamespace creates a namespace named after the test.
func NewNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.TrimRight(name, "-")
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("namespace: %v", err)
	}
	return name
}

// PodTemplate is one pause container with requests.
func PodTemplate(name string, requests corev1.ResourceList) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: name, Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: requests},
	}}}}
}

// NewCluster is a head plus one worker group of n pods with gpus GPUs each.
func NewCluster(ns, name string, n, gpus int32) *gpulabv1alpha1.GPUCluster {
	return &gpulabv1alpha1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gpulabv1alpha1.GPUClusterSpec{
			Head: gpulabv1alpha1.HeadSpec{Template: PodTemplate("head", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{
				Name: "workers", Replicas: n, GPUs: &gpulabv1alpha1.GPURequest{PerPod: &gpus},
				Template: PodTemplate("worker", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}),
			}},
		},
	}
}

// Eventually polls cond until it holds or timeout passes, then fails the
// test with cond's last detail.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := poll.Until(t.Context(), timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// ListPods lists a namespace's pods.
func ListPods(t *testing.T, c client.Client, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// GetCluster reads a GPUCluster.
func GetCluster(t *testing.T, c client.Client, ns, name string) *gpulabv1alpha1.GPUCluster {
	t.Helper()
	gc := &gpulabv1alpha1.GPUCluster{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, gc); err != nil {
		t.Fatal(err)
	}
	return gc
}

// PlayKubelet does what the scheduler and kubelet would: binds unbound
// pods round-robin to the GPU nodes, marks them Running and Ready, and
// finishes pending deletions. It returns how many pods are Running.
func PlayKubelet(t *testing.T, c client.Client, ns string) int {
	t.Helper()
	ctx := context.Background()
	running := 0
	for i, p := range ListPods(t, c, ns) {
		pod := p
		if !pod.DeletionTimestamp.IsZero() {
			_ = c.Delete(ctx, &pod, client.GracePeriodSeconds(0))
			continue
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if pod.Spec.NodeName == "" {
			binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns},
				Target: corev1.ObjectReference{Kind: "Node", Name: fmt.Sprintf("h100-%d", i%4)}}
			if err := c.SubResource("binding").Create(ctx, &pod, binding); err != nil {
				continue
			}
		}
		if pod.Status.Phase != corev1.PodRunning {
			if err := c.Get(ctx, client.ObjectKeyFromObject(&pod), &pod); err != nil {
				continue
			}
			now := metav1.Now()
			pod.Status.Phase = corev1.PodRunning
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			if err := c.Status().Update(ctx, &pod); err != nil {
				continue
			}
		}
		running++
	}
	return running
}

// RunWithEnv is a package's TestMain: it starts one API server with four
// GPU nodes for all the package's tests (none under -short), stores it in
// *env, runs the tests and stops it.
func RunWithEnv(m *testing.M, env **envtest.Environment) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	e, err := envtest.Start(context.Background(), envtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = e.Stop() }()
	if err := CreateGPUNodes(context.Background(), e.Client, 4); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*env = e
	return m.Run()
}
