package conformance

import (
	"context"
	"flag"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/measure"
)

var (
	realGPUsFlag   = flag.Bool("real-gpus", false, "inventory: run a probe pod per GPU node and check its `nvidia-smi -L` UUIDs against the GPUInventory")
	probeImageFlag = flag.String("probe-image", "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04", "image with nvidia-smi for --real-gpus")
)

// probeGPUs runs `nvidia-smi -L` on node in a pod holding all its GPUs and
// compares the UUIDs with the node's GPUInventory.
func probeGPUs(ctx context.Context, t *testing.T, ns string, node corev1.Node, inv *gpulabv1alpha1.GPUInventory) {
	gpus := node.Status.Allocatable["nvidia.com/gpu"]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe-" + node.Name},
		Spec: corev1.PodSpec{
			NodeName:      node.Name,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "probe", Image: *probeImageFlag, Command: []string{"nvidia-smi", "-L"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus.Value(), resource.DecimalSI)}},
			}},
		},
	}
	c := cluster.Client
	if err := c.Create(ctx, pod); err != nil {
		failf(t, "probe on %s: %v", node.Name, err)
		return
	}
	if err := waitFor(ctx, 5*time.Minute, func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, string(pod.Status.Phase)
	}); err != nil || pod.Status.Phase != corev1.PodSucceeded {
		failf(t, "probe on %s did not succeed: %v (phase %s)", node.Name, err, pod.Status.Phase)
		return
	}
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		fatalf(t, "%v", err)
	}
	logs, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		failf(t, "probe logs on %s: %v", node.Name, err)
		return
	}
	defer logs.Close()
	seen, err := measure.ParseNvidiaSMIL(logs)
	if err != nil {
		failf(t, "parsing nvidia-smi -L on %s: %v", node.Name, err)
		return
	}
	if len(seen) != len(inv.Status.GPUs) {
		failf(t, "node %s: nvidia-smi lists %d GPUs, the inventory %d", node.Name, len(seen), len(inv.Status.GPUs))
	}
	for _, g := range inv.Status.GPUs {
		if seen[int(g.Index)] != g.UUID {
			failf(t, "node %s GPU %d: nvidia-smi says %s, the inventory %s", node.Name, g.Index, seen[int(g.Index)], g.UUID)
		}
	}
}
