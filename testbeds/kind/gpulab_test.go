package kind

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// TestDevicePluginAllocatesDistinctGPUs installs gpulab on a kind cluster
// and proves GPUs go through the real kubelet: the agent's device plugin
// makes the kubelet advertise the mock node's 8 GPUs, two pods asking for 4
// each get 4 distinct UUIDs of that node's inventory in
// NVIDIA_VISIBLE_DEVICES and never share one, and a third pod that asks for
// one more stays unschedulable. It also deletes the leader of the
// operator's two replicas and times the failover, then runs the suite in
// the cluster with gpulab-conformance submit (suiteRunsInCluster), and
// last switches the agents to DRA (draClaimsGetOnlyTheirDevices).
func TestDevicePluginAllocatesDistinctGPUs(t *testing.T) {
	opts := kindTestOptions(t)
	opts.Name = "gpulab-test-gpu"
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	c, err := New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Down(ctx)
	start := time.Now()
	if err := c.Up(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up with Volcano and gpulab in %s", time.Since(start).Round(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			if err := c.CollectLogs(context.WithoutCancel(ctx), opts.ArtifactsDir); err != nil {
				t.Log(err)
			}
		}
		if err := c.Down(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	})
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(logr.Discard()) // the client's own logging is not what this test reads
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gpulabv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	probe := buildProbeImage(ctx, t)
	if err := c.LoadImages(ctx, probe); err != nil {
		t.Fatal(err)
	}

	// The worker's capacity comes from the kubelet's device manager.
	var worker string
	deadline := time.Now().Add(3 * time.Minute)
	for worker == "" {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nvidia.com/gpu.present=true"})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			if q := n.Status.Allocatable[gpuResource]; q.Value() == 8 {
				worker = n.Name
			}
		}
		if worker == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no worker advertises 8 allocatable %s within 3m", gpuResource)
			}
			time.Sleep(2 * time.Second)
		}
	}
	inv := &gpulabv1alpha1.GPUInventory{}
	if err := cl.Get(ctx, client.ObjectKey{Name: worker}, inv); err != nil {
		t.Fatalf("the agent published no inventory for %s: %v", worker, err)
	}
	known := map[string]bool{}
	nodeOf := map[string]string{} // UUID → the device node its CDI device gives
	for _, g := range inv.Status.GPUs {
		known[g.UUID] = true
		nodeOf[g.UUID] = fmt.Sprintf("/dev/nvidia%d", g.Index)
	}
	if len(known) != 8 {
		t.Fatalf("inventory of %s lists %d distinct UUIDs, want 8", worker, len(known))
	}

	ns := "gpu-probe"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpuPod := func(name string, gpus int64) *corev1.Pod {
		p := probePod(name, "", probe, "serve", ":8080")
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": worker}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpuResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
		return p
	}
	seen := map[string]string{}
	for _, name := range []string{"gpus-a", "gpus-b"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod(name, 4), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"gpus-a", "gpus-b"} {
		waitPodIP(ctx, t, cs, ns, name)
		uuids := probeLine(ctx, t, cs, ns, name, "NVIDIA_VISIBLE_DEVICES")
		if len(uuids) != 4 || len(slices.Compact(slices.Sorted(slices.Values(uuids)))) != 4 {
			t.Errorf("%s got NVIDIA_VISIBLE_DEVICES %v, want 4 distinct UUIDs", name, uuids)
		}
		// CDI (cdi-cri): the node's containerd resolved the plugin's device
		// names against the agent's spec into exactly those GPUs' nodes.
		var want []string
		for _, u := range uuids {
			want = append(want, nodeOf[u])
		}
		slices.Sort(want)
		if got := probeLine(ctx, t, cs, ns, name, "GPU_DEVICE_NODES"); !slices.Equal(got, want) {
			t.Errorf("%s has device nodes %v, want %v (those of its GPUs %v)", name, got, want, uuids)
		}
		for _, u := range uuids {
			if !known[u] {
				t.Errorf("%s got %s, which is not in %s's inventory", name, u, worker)
			}
			if other, ok := seen[u]; ok {
				t.Errorf("%s and %s share GPU %s", other, name, u)
			}
			seen[u] = name
		}
	}

	// A pod that asks for no GPU gets none: no variable, no device node.
	noGPU := probePod("no-gpu", "", probe, "serve", ":8080")
	noGPU.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": worker}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, noGPU, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodIP(ctx, t, cs, ns, "no-gpu")
	for _, key := range []string{"NVIDIA_VISIBLE_DEVICES", "GPU_DEVICE_NODES"} {
		if got := probeLine(ctx, t, cs, ns, "no-gpu", key); len(got) != 0 {
			t.Errorf("a pod without a GPU request got %s %v", key, got)
		}
	}

	operatorFailsOver(ctx, t, cs)

	// All 8 are held: one more GPU is not there to give.
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, gpuPod("gpus-c", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUnschedulable(ctx, t, cs, ns, "gpus-c")

	// The GPUs free again, the suite runs in the cluster.
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d probe pods still there 2m after their namespace was deleted", len(pods.Items))
		}
		time.Sleep(time.Second)
	}
	suiteRunsInCluster(ctx, t, c, cs)
	draClaimsGetOnlyTheirDevices(ctx, t, c, cs, worker, probe, nodeOf)
}

// operatorFailsOver deletes the leader pod of the operator's 2 replicas and
// times until the other pod holds the Lease.
func operatorFailsOver(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	const ns, lease = "gpulab-system", "gpulab-operator.gpulab.io"
	holder := func() string {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		return pod
	}
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, "gpulab-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Status.AvailableReplicas != 2 {
		t.Fatalf("gpulab-operator has %d available replicas, want 2", dep.Status.AvailableReplicas)
	}
	deadline := time.Now().Add(time.Minute)
	leader := holder()
	for leader == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no holder of Lease %s/%s within 1m", ns, lease)
		}
		time.Sleep(time.Second)
		leader = holder()
	}
	start := time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for {
		if next := holder(); next != "" && next != leader {
			t.Logf("leader %s deleted; %s took the Lease after %s", leader, next, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader within 2m of deleting %s", leader)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probeLine reads the comma-separated list a probe pod printed at start as
// KEY=....
func probeLine(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, key string) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		data, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil {
			for line := range strings.SplitSeq(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, key+"="); ok {
					if v == "" {
						return nil
					}
					return strings.Split(v, ",")
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no %s: %v %s", name, key, err, data)
		}
		time.Sleep(time.Second)
	}
}
