package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/node-agent/dra"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestAdmissionPolicyConfinesSlicesToTheNode installs the agent's shipped
// RBAC (with the dra component's) and admission policy on a real API
// server and acts with a token bound to node-a's agent pod: the slice
// library, as that agent, publishes, updates and prunes node-a's pool,
// while node-b's slices, a node-a slice in node-b's pool, a slice for all
// nodes and another driver's slice are out of its reach.
func TestAdmissionPolicyConfinesSlicesToTheNode(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{
		CRDDirs: []string{filepath.Join("..", "..", "operator", "config", "crd", "bases", "gpulab.io_gpuinventories.yaml")},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	applyConfig(ctx, t, env.Client, "namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "admission-policy.yaml", "dra/access/rbac.yaml")
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentA := agentClient(ctx, t, env, admin, "node-a")
	slices := agentA.ResourceV1().ResourceSlices()

	// node-b's own slice, as its agent published it.
	nodeB, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice("node-b", "node-b", "node-b", dra.DefaultDriverName), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The policy and its parameters take effect asynchronously: wait until
	// it denies node-a's agent a slice of node-b and, once it has read the
	// DRA binding, one of another driver (dry runs: nothing is written).
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	err = poll.Until(ctx, 30*time.Second, func() (bool, string) {
		_, err := slices.Create(ctx, slice("", "node-b", "node-b", dra.DefaultDriverName), dryRun)
		if !denied(err, "may only publish ResourceSlices of its own node and pool") {
			return false, fmt.Sprintf("node-a's agent creating node-b's slice: %v", err)
		}
		_, err = slices.Create(ctx, slice("", "node-a", "node-a", "gpu.nvidia.com"), dryRun)
		return denied(err, "of its driver"), fmt.Sprintf("node-a's agent creating another driver's slice: %v", err)
	})
	if err != nil {
		t.Fatalf("the admission policy never confined ResourceSlices: %v", err)
	}

	// The slice library as node-a's agent: a stale slice of its pool (an
	// unmatched name) is deleted, the pool created, then updated.
	stale, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice("stale-node-a", "node-a", "node-a", dra.DefaultDriverName), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub := dra.Start(ctx, agentA, dra.DefaultDriverName, "node-a", testr.New(t))
	defer pub.Stop()
	pub.Update(gpuStatus(2))
	awaitPool(ctx, t, admin, "node-a", 2, stale.Name)
	pub.Update(gpuStatus(1))
	awaitPool(ctx, t, admin, "node-a", 1, stale.Name)

	for _, tc := range []struct {
		name  string
		slice *resourceapi.ResourceSlice
		msg   string
	}{
		{"node-b's slice", slice("", "node-b", "node-b", dra.DefaultDriverName), "of its own node and pool, not node node-b, pool node-b"},
		{"a node-a slice in node-b's pool", slice("", "node-a", "node-b", dra.DefaultDriverName), "not node node-a, pool node-b"},
		{"a slice for all nodes", allNodes(slice("", "", "node-a", dra.DefaultDriverName)), "not node (none), pool node-a"},
		{"another driver's slice of node-a", slice("", "node-a", "node-a", "gpu.nvidia.com"), "of its driver gpu.gpulab.io, not gpu.nvidia.com"},
	} {
		if _, err := slices.Create(ctx, tc.slice, metav1.CreateOptions{}); !denied(err, tc.msg) {
			t.Errorf("node-a's agent creating %s: %v; want the policy's denial %q", tc.name, err, tc.msg)
		}
	}

	// node-b's slice can be neither changed nor deleted from node-a.
	changed := nodeB.DeepCopy()
	changed.Spec.Devices = nil
	if _, err := slices.Update(ctx, changed, metav1.UpdateOptions{}); !denied(err, "may only change or delete ResourceSlices of its own node, not "+nodeB.Name+" of node node-b") {
		t.Errorf("node-a's agent updating node-b's slice: %v", err)
	}
	if err := slices.Delete(ctx, nodeB.Name, metav1.DeleteOptions{}); !denied(err, "of its own node, not "+nodeB.Name+" of node node-b") {
		t.Errorf("node-a's agent deleting node-b's slice: %v", err)
	}
	if got, err := admin.ResourceV1().ResourceSlices().Get(ctx, nodeB.Name, metav1.GetOptions{}); err != nil || len(got.Spec.Devices) != 1 {
		t.Errorf("node-b's slice after node-a's attempts: %v, %+v", err, got)
	}
	// Nor another driver's slice on node-a itself.
	nvidia, err := admin.ResourceV1().ResourceSlices().Create(ctx, slice("", "node-a", "node-a", "gpu.nvidia.com"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := slices.Delete(ctx, nvidia.Name, metav1.DeleteOptions{}); !denied(err, "of its driver gpu.gpulab.io, not gpu.nvidia.com") {
		t.Errorf("node-a's agent deleting another driver's slice of node-a: %v", err)
	}

	// Its own slice, written directly: create, update, delete.
	own, err := slices.Create(ctx, slice("", "node-a", "node-a", dra.DefaultDriverName), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node-a's agent creating a slice of its own pool: %v", err)
	}
	own.Spec.Devices = nil
	if own, err = slices.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node-a's agent updating its own slice: %v", err)
	}
	if err := slices.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("node-a's agent deleting its own slice: %v", err)
	}
}

// denied reports whether err is the agent admission policy's denial.
func denied(err error, msg string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "gpulab-agent-own-node") && strings.Contains(err.Error(), msg)
}

// agentClient authenticates as the agent's service account with a token
// bound to a pod of the agent on node, so the API server names the node
// in the user's extra info (authentication.kubernetes.io/node-name) as it
// does for the DaemonSet's pods.
func agentClient(ctx context.Context, t *testing.T, env *envtest.Environment, admin kubernetes.Interface, node string) kubernetes.Interface {
	t.Helper()
	const ns, sa = "gpulab-system", "gpulab-agent"
	// Restricted Pod Security, as the namespace enforces.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpulab-agent-" + node},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: sa,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "agent", Image: "gpulab-agent", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to %s: %v", pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyConfig creates every object in the named files of node-agent/config.
func applyConfig(ctx context.Context, t *testing.T, c client.Client, files ...string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("..", "config", f))
		if err != nil {
			t.Fatal(err)
		}
		for doc := range strings.SplitSeq(string(b), "\n---\n") {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := c.Create(ctx, &u); err != nil {
				t.Fatalf("%s: creating %s %s: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// slice is a one-device slice of driver in pool, on node (none when
// empty), named name (generated when empty, as the library does).
func slice(name, node, pool, driver string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:  driver,
			Pool:    resourceapi.ResourcePool{Name: pool, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0"}},
		},
	}
	if name == "" {
		s.GenerateName = "test-"
	}
	if node != "" {
		s.Spec.NodeName = ptr.To(node)
	}
	return s
}

func allNodes(s *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	s.Spec.AllNodes = ptr.To(true)
	return s
}

func gpuStatus(n int) *v1alpha1.GPUInventoryStatus {
	st := &v1alpha1.GPUInventoryStatus{}
	for i := range n {
		st.GPUs = append(st.GPUs, v1alpha1.GPUDevice{Index: int32(i), UUID: fmt.Sprintf("GPU-%d", i),
			Health: v1alpha1.GPUHealth{State: v1alpha1.GPUHealthy}})
	}
	return st
}

// awaitPool waits until node's pool of the driver is one slice, not
// stale, with devices devices.
func awaitPool(ctx context.Context, t *testing.T, admin kubernetes.Interface, node string, devices int, stale string) {
	t.Helper()
	err := poll.Until(ctx, 30*time.Second, func() (bool, string) {
		list, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		var got *resourceapi.ResourceSlice
		for i, s := range list.Items {
			if s.Spec.Driver == dra.DefaultDriverName && s.Spec.Pool.Name == node {
				names = append(names, fmt.Sprintf("%s (%d devices)", s.Name, len(s.Spec.Devices)))
				got = &list.Items[i]
			}
		}
		return len(names) == 1 && got.Name != stale && len(got.Spec.Devices) == devices,
			fmt.Sprintf("%s's pool is %v, want one slice of %d devices", node, names, devices)
	})
	if err != nil {
		t.Fatalf("the slice library as %s's agent: %v", node, err)
	}
}
