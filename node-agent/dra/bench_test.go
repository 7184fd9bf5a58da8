package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/dra"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// BenchmarkSliceLatency measures the two goals against a real API
// server: from the kubelet plugin's start (and its first scan) until the
// node's ResourceSlice is served, and from a scan that finds a GPU
// Unhealthy until the served slice has dropped it. Both are reported in
// ms (slice-ms, unhealthy-ms); the goals are 2 s and one scan interval
// (--interval, 30 s by default).
func BenchmarkSliceLatency(b *testing.B) {
	ctrllog.SetLogger(logr.Discard()) // envtest's CRD install logs through it
	env := envtest.StartForTest(b, envtest.Options{})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var publish, unhealthy time.Duration
	for i := 0; b.Loop(); i++ {
		node := fmt.Sprintf("bench-%d", i)
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		root, err := os.MkdirTemp("", "dra") // short: unix socket paths are limited
		if err != nil {
			b.Fatal(err)
		}
		reg, plug := filepath.Join(root, "reg"), filepath.Join(root, "plug")
		for _, d := range []string{reg, plug} {
			if err := os.Mkdir(d, 0o700); err != nil {
				b.Fatal(err)
			}
		}
		st := &v1alpha1.GPUInventoryStatus{}
		for g := range 8 {
			st.GPUs = append(st.GPUs, v1alpha1.GPUDevice{Index: int32(g), UUID: fmt.Sprintf("GPU-%s-%d", node, g),
				Product: "NVIDIA H200", Health: v1alpha1.GPUHealth{State: v1alpha1.GPUHealthy}})
		}

		start := time.Now()
		p, err := dra.StartPlugin(ctx, dra.PluginOptions{Node: node, Kube: kube, CDIDir: filepath.Join(root, "cdi"),
			RegistrarDir: reg, PluginDir: plug, Log: logr.Discard()})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Update(ctx, st); err != nil {
			b.Fatal(err)
		}
		waitForDevices(b, kube, node, 8)
		publish += time.Since(start)

		st.GPUs[3].Health.State = v1alpha1.GPUUnhealthy
		start = time.Now()
		if err := p.Update(ctx, st); err != nil {
			b.Fatal(err)
		}
		waitForDevices(b, kube, node, 7)
		unhealthy += time.Since(start)

		p.Stop()
		_ = os.RemoveAll(root)
	}
	b.ReportMetric(float64(publish.Milliseconds())/float64(b.N), "slice-ms")
	b.ReportMetric(float64(unhealthy.Milliseconds())/float64(b.N), "unhealthy-ms")
}

// waitForDevices polls, with a deadline, until node's one slice serves n
// devices.
func waitForDevices(b *testing.B, kube kubernetes.Interface, node string, n int) {
	b.Helper()
	var served int
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, err
		}
		served = len(l.Items)
		return served == 1 && len(l.Items[0].Spec.Devices) == n, nil
	})
	if err != nil {
		b.Fatalf("node %s: %d slices, not one with %d devices, within 30s: %v", node, served, n, err)
	}
}
