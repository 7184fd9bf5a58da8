package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// testFleet is small but mixed: 16 H100s on two nodes and 8 A100s on one.
const testFleet = "dgx-h100=2,dgx-a100=1"

// TestTestbedIsReal brings the testbed up and proves it is a real cluster
// with a working Volcano: gangs bind all-or-nothing on fake GPU nodes that
// look like the profiles' machines. It tears the testbed down even on failure.
func TestTestbedIsReal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fleet, err := ParseFleet(testFleet)
	if err != nil {
		t.Fatal(err)
	}
	tb := startForTest(t, Options{Name: "gpulab-test", Fleet: fleet, Log: testLog{t}})
	c, err := tb.Client()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a second up says the testbed is running", func(t *testing.T) {
		err := tb.Up(ctx)
		if !errors.Is(err, ErrAlreadyRunning) {
			t.Fatalf("second Up returned %v, want ErrAlreadyRunning", err)
		}
	})

	t.Run("nodes carry the profiles' capacity, GFD labels and GPUInventory", func(t *testing.T) {
		for _, want := range fleet.Nodes() {
			var got corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, &got); err != nil {
				t.Fatalf("node %s: %v", want.Name, err)
			}
			for _, list := range []corev1.ResourceList{got.Status.Capacity, got.Status.Allocatable} {
				if gpus := list[GPUResource]; gpus.Value() != 8 {
					t.Errorf("node %s: nvidia.com/gpu = %s, want 8", got.Name, gpus.String())
				}
			}
			for _, key := range []string{"nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.family"} {
				if got.Labels[key] != want.Labels[key] || got.Labels[key] == "" {
					t.Errorf("node %s: label %s = %q, want %q", got.Name, key, got.Labels[key], want.Labels[key])
				}
			}
		}
		for _, want := range fleet.Nodes() {
			var inv gpulabv1alpha1.GPUInventory
			if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, &inv); err != nil {
				t.Fatalf("GPUInventory of %s: %v", want.Name, err)
			}
			sum := inv.Status.Summary
			if sum.Count != 8 || sum.Healthy != 8 || sum.Product != want.Labels["nvidia.com/gpu.product"] || fmt.Sprint(sum.MemoryMiB) != want.Labels["nvidia.com/gpu.memory"] {
				t.Errorf("GPUInventory of %s: %+v, want 8 healthy %s with %s MiB", want.Name, sum, want.Labels["nvidia.com/gpu.product"], want.Labels["nvidia.com/gpu.memory"])
			}
		}
		var a100 corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: "dgx-a100-0"}, &a100); err != nil {
			t.Fatal(err)
		}
		if p := a100.Labels["nvidia.com/gpu.product"]; p != "NVIDIA-A100-SXM4-40GB" {
			t.Errorf("dgx-a100-0 product label %q, want NVIDIA-A100-SXM4-40GB", p)
		}
	})

	t.Run("a gang that fits binds all of its pods", func(t *testing.T) {
		ns := createNamespace(t, c, "gang-fits")
		createGang(t, c, ns, "fits", 3, 4, nil)
		err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			pods := gangPods(t, c, ns)
			ready := 0
			for _, p := range pods {
				if p.Spec.NodeName != "" && podReady(&p) {
					ready++
				}
			}
			return ready == 3, nil
		})
		if err != nil {
			t.Fatalf("gang of 3 x 4 GPUs did not bind and become Ready: %v; pods: %s", err, describePods(gangPods(t, c, ns)))
		}
		var pg schedulingv1beta1.PodGroup
		if err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fits"}, &pg)
			return err == nil && pg.Status.Phase == schedulingv1beta1.PodGroupRunning, client.IgnoreNotFound(err)
		}); err != nil {
			t.Fatalf("PodGroup phase %q, want Running: %v", pg.Status.Phase, err)
		}
	})

	t.Run("a gang that cannot fit binds none of its pods", func(t *testing.T) {
		ns := createNamespace(t, c, "gang-too-big")
		// Three whole H100 nodes; the fleet has two.
		createGang(t, c, ns, "too-big", 3, 8, map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
		var pg schedulingv1beta1.PodGroup
		err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			assertNoneBound(t, c, ns)
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "too-big"}, &pg); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return hasCondition(&pg, schedulingv1beta1.PodGroupUnschedulableType), nil
		})
		if err != nil {
			t.Fatalf("PodGroup never reported Unschedulable: %v; status %+v", err, pg.Status)
		}
		// Keep watching for several scheduling periods (1 s each): still none bound.
		window := time.Now().Add(5 * time.Second)
		_ = poll(ctx, 5*time.Second, func(context.Context) (bool, error) {
			assertNoneBound(t, c, ns)
			return time.Now().After(window), nil
		})
	})

	t.Run("kube-apiserver and vc-scheduler restart with new PIDs, a dead component starts again", func(t *testing.T) {
		for _, component := range []string{"kube-apiserver", "vc-scheduler"} {
			before := componentPID(t, tb, component)
			if err := tb.Restart(ctx, component); err != nil {
				t.Fatalf("restart %s: %v", component, err)
			}
			after := componentPID(t, tb, component)
			if after == before {
				t.Errorf("%s has pid %d after its restart, the same as before", component, after)
			}
			if processAlive(before) {
				t.Errorf("%s: old pid %d still alive after the restart", component, before)
			}
			var nodes corev1.NodeList
			if err := c.List(ctx, &nodes); err != nil {
				t.Fatalf("API after restarting %s: %v", component, err)
			}
			if len(nodes.Items) != len(fleet.Nodes()) {
				t.Errorf("API after restarting %s lists %d nodes, want %d", component, len(nodes.Items), len(fleet.Nodes()))
			}
			// Every other component survived the restart too.
			if err := tb.WaitReady(ctx); err != nil {
				t.Fatalf("after restarting %s: %v", component, err)
			}
		}
		// A component that died is started again.
		dead := componentPID(t, tb, "vc-controller-manager")
		if err := syscall.Kill(dead, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := poll(ctx, 10*time.Second, func(context.Context) (bool, error) { return !processAlive(dead), nil }); err != nil {
			t.Fatalf("vc-controller-manager (pid %d) survived SIGKILL: %v", dead, err)
		}
		if err := tb.Restart(ctx, "vc-controller-manager"); err != nil {
			t.Fatalf("restart a dead vc-controller-manager: %v", err)
		}
		if pid := componentPID(t, tb, "vc-controller-manager"); pid == dead {
			t.Errorf("vc-controller-manager still has its dead pid %d", pid)
		}
		if err := tb.WaitReady(ctx); err != nil {
			t.Fatalf("after starting vc-controller-manager again: %v", err)
		}

		// The restarted scheduler schedules.
		ns := createNamespace(t, c, "after-restart")
		createGang(t, c, ns, "after-restart", 2, 4, nil)
		if err := poll(ctx, time.Minute, func(context.Context) (bool, error) {
			bound := 0
			for _, p := range gangPods(t, c, ns) {
				if p.Spec.NodeName != "" {
					bound++
				}
			}
			return bound == 2, nil
		}); err != nil {
			t.Fatalf("gang not bound by the restarted vc-scheduler: %v; pods: %s", err, describePods(gangPods(t, c, ns)))
		}
		if err := tb.Restart(ctx, "no-such-component"); err == nil {
			t.Error("restarting an unknown component succeeded")
		}
	})

	t.Run("down leaves no process and no port behind", func(t *testing.T) {
		var pids []int
		for _, comp := range tb.Components() {
			if !comp.Running {
				t.Errorf("%s is not running before down (log %s)", comp.Name, comp.Log)
			}
			pids = append(pids, comp.PID)
		}
		status, err := tb.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ports []int
		for _, p := range status.Ports.all() {
			ports = append(ports, *p)
		}
		if err := tb.Down(ctx); err != nil {
			t.Fatalf("down: %v", err)
		}
		for _, pid := range pids {
			if processAlive(pid) {
				t.Errorf("pid %d still alive after down", pid)
			}
		}
		for _, port := range ports {
			if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
				conn.Close()
				t.Errorf("port %d still accepts connections after down (listener: %s)", port, portOwner(port))
			}
		}
	})
}

// startForTest is localtest.Start for this package's own tests (localtest
// imports this package, so they cannot use it).
func startForTest(t *testing.T, opts Options) *Testbed {
	t.Helper()
	if testing.Short() {
		t.Skip("brings up the local testbed; skipped with -short")
	}
	tb, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Down(context.Background()); err != nil {
			t.Errorf("testbed down: %v", err)
		}
	})
	if err := tb.Up(t.Context()); err != nil {
		t.Fatalf("testbed up: %v", err)
	}
	return tb
}

func componentPID(t *testing.T, tb *Testbed, name string) int {
	t.Helper()
	for _, c := range tb.Components() {
		if c.Name == name {
			if !c.Running {
				t.Fatalf("%s is not running (log %s)", name, c.Log)
			}
			return c.PID
		}
	}
	t.Fatalf("no component %s", name)
	return 0
}

// createGang creates a Volcano PodGroup of n pods with gpus GPUs each, then
// the pods, the way a gang-aware operator must: PodGroup first.
func createGang(t *testing.T, c client.Client, ns, name string, n, gpus int, nodeSelector map[string]string) {
	t.Helper()
	ctx := t.Context()
	perPod := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("1"),
		corev1.ResourceMemory: resource.MustParse("1Gi"),
		GPUResource:           *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	total := corev1.ResourceList{}
	for k, v := range perPod {
		q := v.DeepCopy()
		q.Mul(int64(n))
		total[k] = q
	}
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			MinMember:    int32(n),
			Queue:        "default",
			MinResources: &total,
		},
	}
	if err := c.Create(ctx, pg); err != nil {
		t.Fatalf("create PodGroup: %v", err)
	}
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   ns,
				Name:        fmt.Sprintf("%s-%d", name, i),
				Labels:      map[string]string{"gang": name},
				Annotations: map[string]string{schedulingv1beta1.KubeGroupNameAnnotationKey: name},
			},
			Spec: corev1.PodSpec{
				SchedulerName: "volcano",
				NodeSelector:  nodeSelector,
				Containers: []corev1.Container{{
					Name:      "worker",
					Image:     "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: perPod, Limits: corev1.ResourceList{GPUResource: perPod[GPUResource]}},
				}},
			},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatalf("create pod: %v", err)
		}
	}
}

func createNamespace(t *testing.T, c client.Client, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	// Pods are refused until the controller-manager has made the
	// namespace's default ServiceAccount.
	if err := poll(t.Context(), 30*time.Second, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: name, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("namespace %s has no default ServiceAccount: %v", name, err)
	}
	return name
}

func gangPods(t *testing.T, c client.Client, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatalf("list pods: %v", err)
	}
	return pods.Items
}

func assertNoneBound(t *testing.T, c client.Client, ns string) {
	t.Helper()
	for _, p := range gangPods(t, c, ns) {
		if p.Spec.NodeName != "" {
			t.Fatalf("pod %s of an unschedulable gang was bound to %s", p.Name, p.Spec.NodeName)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasCondition(pg *schedulingv1beta1.PodGroup, typ schedulingv1beta1.PodGroupConditionType) bool {
	for _, c := range pg.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func describePods(pods []corev1.Pod) string {
	s := ""
	for _, p := range pods {
		s += fmt.Sprintf("%s(node=%q phase=%s) ", p.Name, p.Spec.NodeName, p.Status.Phase)
	}
	return s
}

// testLog sends the testbed's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}

// portOwner names the processes listening on a loopback port, from /proc,
// for a failure message.
func portOwner(port int) string {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			// local_address is ADDR:PORT in hex; state 0A is LISTEN.
			if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	var owners []string
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			dir := filepath.Dir(filepath.Dir(fd))
			cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
			stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
			owners = append(owners, fmt.Sprintf("pid %s %q (stat %s)", filepath.Base(dir), strings.ReplaceAll(string(cmd), "\x00", " "), strings.TrimSpace(string(stat))))
		}
	}
	if len(owners) == 0 {
		return "no owner found"
	}
	return strings.Join(owners, "; ")
}
