package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/kind/dockerhost"
	"github.com/gpulab/gpulab/testbeds/kind/images"
	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
)

// The cluster test builds the node image (minutes cold) and creates real
// clusters, so it runs only when asked: GPULAB_KIND_TEST=1, on a host where
// Docker runs privileged containers (gpulab-testbed docker-up).
// GPULAB_KIND_WORKERS sets the workers (default 1).
func kindTestOptions(t *testing.T) Options {
	t.Helper()
	if os.Getenv("GPULAB_KIND_TEST") != "1" {
		t.Skip("kind cluster test not requested: set GPULAB_KIND_TEST=1 (needs Docker; see gpulab-testbed docker-up)")
	}
	// Asked for and unusable is a failure with the reason, never a skip: CI
	// would otherwise pass without a kind cluster ever running.
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := binaries.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dockerhost.UseStarted(DockerStateDir(cache)); err != nil {
		t.Fatal(err)
	}
	if err := dockerhost.Usable(context.Background()); err != nil {
		t.Fatalf("GPULAB_KIND_TEST=1 but Docker is not usable here (gpulab-testbed docker-up starts one): %v", err)
	}
	workers := 1
	if v := os.Getenv("GPULAB_KIND_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("GPULAB_KIND_WORKERS=%q: want a positive number", v)
		}
		workers = n
	}
	return Options{
		// Concurrent runs on one host get distinct clusters.
		Name: fmt.Sprintf("gpulab-test-%d", os.Getpid()), Workers: workers, Log: testWriter{t},
		ArtifactsDir: filepath.Join(root, "_artifacts", "kind-"+strings.ReplaceAll(t.Name(), "/", "-")),
	}
}

// TestClusterRunsPodsAcrossNodes creates a cluster from the locally built
// node image and proves what kind adds over the local testbed: real
// kubelets run a locally built image (loaded with kind's loader), pods on
// different nodes reach each other directly and by Service name through
// CoreDNS; then the cluster is deleted.
func TestClusterRunsPodsAcrossNodes(t *testing.T) {
	opts := kindTestOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Down(ctx) // a cluster left behind by an interrupted run
	start := time.Now()
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster with %d workers created and ready in %s", opts.Workers, time.Since(start).Round(time.Second))
	deleted := false
	t.Cleanup(func() {
		if t.Failed() {
			if err := c.CollectLogs(context.WithoutCancel(ctx), opts.ArtifactsDir); err != nil {
				t.Log(err)
			} else {
				t.Logf("node logs in %s", opts.ArtifactsDir)
			}
		}
		if !deleted {
			if err := c.Down(context.WithoutCancel(ctx)); err != nil {
				t.Error(err)
			}
		}
	})

	probe := buildProbeImage(ctx, t)
	if err := c.LoadImages(ctx, probe); err != nil {
		t.Fatal(err)
	}
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var controlPlane, worker string
	for _, n := range nodes.Items {
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			controlPlane = n.Name
		} else if worker == "" {
			worker = n.Name
			if n.Labels["gpulab.io/testbed-profile"] != DefaultWorkerProfile {
				t.Errorf("worker %s has labels %v, want gpulab.io/testbed-profile=%s", n.Name, n.Labels, DefaultWorkerProfile)
			}
		}
	}
	if controlPlane == "" || worker == "" {
		t.Fatalf("want a control-plane and a worker node, got %d nodes", len(nodes.Items))
	}

	ns := "probe"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	server := probePod("server", controlPlane, probe, "serve", ":8080")
	server.Labels = map[string]string{"app": "probe-server"}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-server"},
		Spec:       corev1.ServiceSpec{Selector: server.Labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serverIP := waitPodIP(ctx, t, client, ns, "server")

	// Directly to the pod's IP on another node, then by Service name.
	for name, url := range map[string]string{
		"direct":  fmt.Sprintf("http://%s:8080/", serverIP),
		"service": fmt.Sprintf("http://probe-server.%s.svc.cluster.local/", ns),
	} {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "client-" + name},
			Spec: batchv1.JobSpec{
				BackoffLimit: new(int32),
				Template:     corev1.PodTemplateSpec{Spec: probePod("", worker, probe, "get", url).Spec},
			},
		}
		job.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		if _, err := client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"client-direct", "client-service"} {
		waitJob(ctx, t, client, ns, name)
		logs := jobLogs(ctx, t, client, ns, name)
		if !strings.Contains(logs, "hello from server") {
			t.Errorf("%s printed %q, want the server's greeting", name, logs)
		}
	}

	if err := c.Down(ctx); err != nil {
		t.Fatal(err)
	}
	deleted = true
	names, err := c.provider.List()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, opts.Name) {
		t.Errorf("cluster %q still listed after Down: %v", opts.Name, names)
	}
}

// buildProbeImage builds the probe workload (a static Go binary) into a
// FROM scratch image.
func buildProbeImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "probe")
	if err := command.Run(ctx, command.GoBuild{Pkg: "./internal/probe", Out: bin, Static: true}.Cmd()); err != nil {
		t.Fatal(err)
	}
	ref := "gpulab-kind-probe:test"
	if _, err := images.Build(ctx, images.Recipe{Ref: ref, Base: "scratch", Files: map[string]string{"/probe": bin}, Entrypoint: []string{"/probe"}},
		images.Options{WorkDir: dir}); err != nil {
		t.Fatal(err)
	}
	return ref
}

func probePod(name, node, image string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "probe", Image: image, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}
}

func waitPodIP(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" {
			return pod.Status.PodIP
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s not running with an IP: %v (last: %v)", ns, name, ctx.Err(), podState(pod, err))
		case <-time.After(time.Second):
		}
	}
}

func podState(pod *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("phase %s, conditions %v, containers %v", pod.Status.Phase, pod.Status.Conditions, pod.Status.ContainerStatuses)
}

func waitJob(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	for {
		job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && job.Status.Succeeded > 0 {
			return
		}
		if err == nil && job.Status.Failed > 0 {
			t.Fatalf("job %s failed: %s", name, jobLogs(ctx, t, client, ns, name))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s did not finish: %v", name, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func jobLogs(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, job string) string {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) == 0 {
		return fmt.Sprintf("(no pods: %v)", err)
	}
	data, err := client.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(logs: %v)", err)
	}
	return string(data)
}

// testWriter sends progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
