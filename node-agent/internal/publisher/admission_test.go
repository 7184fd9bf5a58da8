package publisher_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/node-agent/internal/labels"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
	"github.com/gpulab/gpulab/testbeds/local"
)

const (
	agentUser     = "system:serviceaccount:gpulab-system:gpulab-agent"
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// asAgent is a client that authenticates as the agent's service account with
// a pod-bound token for node (no node when node is empty).
func asAgent(t *testing.T, node string) client.WithWatch {
	t.Helper()
	return asUser(t, agentUser, node)
}

// asUser is a client that authenticates as user with a pod-bound token for
// node (no node when node is empty).
func asUser(t *testing.T, user, node string) client.WithWatch {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: local.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func state() publisher.State {
	return publisher.State{
		Status: v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08", Summary: v1alpha1.InventorySummary{Count: 0}},
		Labels: map[string]string{"nvidia.com/gpu.count": "0"},
	}
}

// denied reports whether err is the admission policy's denial.
func denied(err error, msg string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "gpulab-agent-own-node") && strings.Contains(err.Error(), msg)
}

// installPolicy applies the shipped manifests, creates node-a and node-b and
// waits until the admission policy is in force for user (an agent's service
// account) on node-a.
func installPolicy(t *testing.T, user string) {
	t.Helper()
	e := needEnv(t)
	// Every shipped manifest must be accepted by the API server (the
	// DaemonSet's pods never run here: envtest has no controllers).
	applyManifests(t, e.Client, "namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "admission-policy.yaml",
		"daemonset.yaml", "testbed/rbac-capacity.yaml")
	createNode(t, e.Client, "node-a", map[string]string{"kubernetes.io/hostname": "node-a"})
	createNode(t, e.Client, "node-b", map[string]string{"kubernetes.io/hostname": "node-b"})
	// The policy takes effect asynchronously: wait until it denies a write,
	// with a fresh publisher each time so that every attempt writes.
	var err error
	eventually(t, "the admission policy to deny node-a's agent writing node-b", func() bool {
		err = publisher.New(asUser(t, user, "node-a"), publisher.Options{}).Publish(ctx(t), "node-b", state())
		return denied(err, "may only write its own node")
	})
	t.Logf("cross-node write denied: %v", err)
}

// TestAdmissionPolicy installs the shipped RBAC and admission policy and
// writes as the agent's service account: it may write its own node's
// inventory and GFD labels and nothing of any other node.
func TestAdmissionPolicy(t *testing.T) {
	e := needEnv(t)
	installPolicy(t, agentUser)
	agentA := asAgent(t, "node-a")
	var err error

	if err := publisher.New(agentA, publisher.Options{LabelNode: true}).Publish(ctx(t), "node-a", state()); err != nil {
		t.Fatalf("node-a's agent writing node-a: %v", err)
	}
	var inv v1alpha1.GPUInventory
	if err := e.Client.Get(ctx(t), client.ObjectKey{Name: "node-a"}, &inv); err != nil {
		t.Fatalf("node-a's inventory: %v", err)
	}

	// Its own heartbeat Lease, with the shipped Role; another node's, never.
	beating := publisher.New(agentA, publisher.Options{HeartbeatPeriod: time.Second})
	eventually(t, "node-a's agent to create its heartbeat Lease", func() bool {
		err = beating.Publish(ctx(t), "node-a", state())
		return err == nil && e.Client.Get(ctx(t), client.ObjectKey{Namespace: v1alpha1.DefaultHeartbeatLeaseNamespace, Name: "node-a"}, &coordinationv1.Lease{}) == nil
	})
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultHeartbeatLeaseNamespace, Name: "node-b",
		Labels: map[string]string{v1alpha1.HeartbeatLeaseLabel: "true"}}}
	if err := agentA.Create(ctx(t), foreign); !denied(err, "may only write its own node") {
		t.Errorf("node-a's agent creating node-b's heartbeat Lease: %v", err)
	}

	// Labels of another node.
	err = publisher.New(agentA, publisher.Options{LabelNode: true}).Publish(ctx(t), "node-b", state())
	if !denied(err, "may only write its own node") {
		t.Errorf("node-a's agent labelling node-b: %v", err)
	}
	var b corev1.Node
	if err := e.Client.Get(ctx(t), client.ObjectKey{Name: "node-b"}, &b); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Labels["nvidia.com/gpu.count"]; ok {
		t.Errorf("node-b was labelled: %v", b.Labels)
	}

	// Node status (testbeds' --advertise-capacity, with its extra RBAC).
	withCapacity := publisher.Options{AdvertiseCapacity: true}
	if err := publisher.New(agentA, withCapacity).Publish(ctx(t), "node-b", state()); !denied(err, "may only write its own node") {
		t.Errorf("node-a's agent setting node-b's capacity: %v", err)
	}
	if err := e.Client.Get(ctx(t), client.ObjectKey{Name: "node-b"}, &b); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Status.Capacity[gfd.GPUResource]; ok {
		t.Errorf("node-b's capacity was set: %v", b.Status.Capacity)
	}
	if err := publisher.New(agentA, withCapacity).Publish(ctx(t), "node-a", state()); err != nil {
		t.Errorf("node-a's agent setting node-a's capacity: %v", err)
	}

	// Labels outside nvidia.com/ and the spec of its own node.
	var a corev1.Node
	if err := agentA.Get(ctx(t), client.ObjectKey{Name: "node-a"}, &a); err != nil {
		t.Fatal(err)
	}
	relabel := a.DeepCopy()
	relabel.Labels["kubernetes.io/hostname"] = "node-b"
	if err := agentA.Patch(ctx(t), relabel, client.MergeFrom(&a)); !denied(err, "may only change the GFD labels it publishes on its node, not kubernetes.io/hostname") {
		t.Errorf("node-a's agent changing a kubernetes.io label: %v", err)
	}
	cordon := a.DeepCopy()
	cordon.Spec.Unschedulable = true
	if err := agentA.Patch(ctx(t), cordon, client.MergeFrom(&a)); !denied(err, "may not change its node's spec") {
		t.Errorf("node-a's agent cordoning its node: %v", err)
	}

	// A credential without a node (e.g. a long-lived token secret).
	err = publisher.New(asAgent(t, ""), publisher.Options{}).Publish(ctx(t), "node-a", state())
	if !denied(err, "bound service-account token") {
		t.Errorf("agent without a node-bound token: %v", err)
	}
	// RBAC: the agent may not delete inventories at all.
	if err := agentA.Delete(ctx(t), &inv); !apierrors.IsForbidden(err) {
		t.Errorf("deleting an inventory as the agent: %v", err)
	}
}

// TestAdmissionPolicyOwnNodeMetadata: on its own node the agent may set the
// GFD labels it publishes and nothing else: no other label (not even other
// nvidia.com/ ones, which steer the GPU operator), annotation, finalizer,
// owner reference, or status other than its nvidia.com/gpu capacity.
func TestAdmissionPolicyOwnNodeMetadata(t *testing.T) {
	installPolicy(t, agentUser)
	agentA := asAgent(t, "node-a")
	for _, tc := range []struct {
		name    string
		mutate  func(n *corev1.Node)
		message string // empty: allowed
	}{
		{"its GFD label", func(n *corev1.Node) { n.Labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3" }, ""},
		{"removing its GFD label", func(n *corev1.Node) { delete(n.Labels, "nvidia.com/gpu.product") }, ""},
		{"a GPU operator label", func(n *corev1.Node) { n.Labels["nvidia.com/gpu.deploy.driver"] = "false" },
			"may only change the GFD labels it publishes on its node, not nvidia.com/gpu.deploy.driver"},
		{"the MIG manager's label", func(n *corev1.Node) { n.Labels["nvidia.com/mig.config"] = "all-1g.10gb" },
			"not nvidia.com/mig.config"},
		{"another label", func(n *corev1.Node) { n.Labels["team"] = "ml" }, "not team"},
		{"removing another label", func(n *corev1.Node) { delete(n.Labels, "kubernetes.io/hostname") },
			"not kubernetes.io/hostname"},
		{"an annotation", func(n *corev1.Node) { n.Annotations = map[string]string{"gpulab.io/note": "x"} },
			"may not change its node's annotations"},
		{"a finalizer", func(n *corev1.Node) { n.Finalizers = append(n.Finalizers, "gpulab.io/hold") },
			"may not change its node's finalizers"},
		{"an owner reference", func(n *corev1.Node) {
			n.OwnerReferences = append(n.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "node-b", UID: "u"})
		}, "may not change its node's owner references"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n corev1.Node
			if err := agentA.Get(ctx(t), client.ObjectKey{Name: "node-a"}, &n); err != nil {
				t.Fatal(err)
			}
			changed := n.DeepCopy()
			tc.mutate(changed)
			err := agentA.Patch(ctx(t), changed, client.MergeFrom(&n))
			switch {
			case tc.message == "" && err != nil:
				t.Fatalf("allowed change denied: %v", err)
			case tc.message != "" && !denied(err, tc.message):
				t.Fatalf("got %v; want the policy's denial %q", err, tc.message)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}

	// Status (testbeds' --advertise-capacity): only nvidia.com/gpu.
	var n corev1.Node
	if err := agentA.Get(ctx(t), client.ObjectKey{Name: "node-a"}, &n); err != nil {
		t.Fatal(err)
	}
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	ac := corev1ac.Node("node-a").WithStatus(corev1ac.NodeStatus().WithCapacity(rl).WithAllocatable(rl))
	err := agentA.Status().Apply(ctx(t), ac, client.FieldOwner(publisher.DefaultFieldManager), client.ForceOwnership)
	if !denied(err, "may only change its node's nvidia.com/gpu capacity and allocatable") {
		t.Errorf("node-a's agent setting its node's cpu capacity: %v", err)
	}
}

// TestAdmissionPolicyFollowsTheAgentsBindings: the policy knows the agent by
// the ClusterRoleBindings that grant the agent's rights, not by a service
// account name, so an agent deployed elsewhere is held to its node too, and
// service accounts that are not the agent's are left alone.
func TestAdmissionPolicyFollowsTheAgentsBindings(t *testing.T) {
	e := needEnv(t)
	labels := map[string]string{"app.kubernetes.io/name": "gpulab-agent", "app.kubernetes.io/part-of": "gpulab"}
	relocated := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gpulab-agent-relocated", Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gpulab-agent"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "gpu-nodes", Name: "node-agent"}},
	}
	labeller := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "node-labeller"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}}},
	}
	labellerBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "node-labeller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "node-labeller"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "labeller"}},
	}
	for _, o := range []client.Object{relocated, labeller, labellerBinding} {
		if err := e.Client.Create(ctx(t), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Client.Delete(context.Background(), o) })
	}
	installPolicy(t, "system:serviceaccount:gpu-nodes:node-agent")
	if err := publisher.New(asUser(t, "system:serviceaccount:gpu-nodes:node-agent", "node-a"), publisher.Options{LabelNode: true}).
		Publish(ctx(t), "node-a", state()); err != nil {
		t.Errorf("the relocated agent writing its own node: %v", err)
	}

	// Another pod's service account with a node-bound token and its own
	// rights on nodes (a node labeller) may label any node.
	other := asUser(t, "system:serviceaccount:kube-system:labeller", "node-a")
	var err error
	eventually(t, "the labeller's RBAC", func() bool {
		var b corev1.Node
		if err = other.Get(ctx(t), client.ObjectKey{Name: "node-b"}, &b); err != nil {
			return false
		}
		changed := b.DeepCopy()
		changed.Labels["team"] = "ml"
		err = other.Patch(ctx(t), changed, client.MergeFrom(&b))
		// RBAC takes effect asynchronously too; a policy denial is final.
		return !apierrors.IsForbidden(err) || denied(err, "")
	})
	if err != nil {
		t.Errorf("a service account that is not the agent's labelling node-b: %v", err)
	}
}

// TestAgentServesClearHealthAsItsServiceAccount: the agent's rights cover
// watching its inventory for the clear-health annotation and removing it,
// on its own node only.
func TestAgentServesClearHealthAsItsServiceAccount(t *testing.T) {
	e := needEnv(t)
	installPolicy(t, agentUser)
	agentA := asAgent(t, "node-a")
	if err := publisher.New(agentA, publisher.Options{}).Publish(ctx(t), "node-a", state()); err != nil {
		t.Fatal(err)
	}
	annotate := func(node, value string) {
		t.Helper()
		inv := &v1alpha1.GPUInventory{}
		if err := e.Client.Get(ctx(t), client.ObjectKey{Name: node}, inv); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(inv.DeepCopy())
		inv.Annotations = map[string]string{v1alpha1.ClearHealthAnnotation: value}
		if err := e.Client.Patch(ctx(t), inv, patch); err != nil {
			t.Fatal(err)
		}
	}
	annotate("node-a", "all")

	seen := make(chan string, 16)
	watchCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- publisher.New(agentA, publisher.Options{}).WatchClearHealth(watchCtx, "node-a", func(v string) { seen <- v })
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	await := func(want string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case v := <-seen:
				if v == want {
					return
				}
			case <-timeout:
				t.Fatalf("the watch never reported %q", want)
			}
		}
	}
	await("all")
	if err := publisher.New(agentA, publisher.Options{}).ClearHealthDone(ctx(t), "node-a", "all"); err != nil {
		t.Fatalf("removing the annotation as node-a's agent: %v", err)
	}
	await("")

	// Node-b's inventory, written by someone else, is out of node-a's reach.
	if err := e.Client.Create(ctx(t), &v1alpha1.GPUInventory{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	annotate("node-b", "all")
	if err := publisher.New(agentA, publisher.Options{}).ClearHealthDone(ctx(t), "node-b", "all"); !denied(err, "may only write its own node") {
		t.Errorf("node-a's agent removing node-b's annotation: %v", err)
	}
}

// TestPolicyNamesExactlyTheAgentsLabels: the label keys the admission policy
// lets the agent change are the keys internal/labels produces for a machine
// that reports everything, so neither can change without the other.
func TestPolicyNamesExactlyTheAgentsLabels(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "admission-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var policy struct {
		Kind string
		Spec struct {
			Variables []struct{ Name, Expression string }
		}
	}
	var expr string
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		if err := yaml.Unmarshal([]byte(doc), &policy); err != nil {
			t.Fatal(err)
		}
		for _, v := range policy.Spec.Variables {
			if policy.Kind == "ValidatingAdmissionPolicy" && v.Name == "ownedLabels" {
				expr = v.Expression
			}
		}
	}
	var allowed []string
	for _, m := range regexp.MustCompile(`'([^']+)'`).FindAllStringSubmatch(expr, -1) {
		allowed = append(allowed, m[1])
	}

	be, err := mock.New("dgx-h100", "labels", nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = be.Shutdown() }()
	snap, err := be.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	produced := slices.Sorted(maps.Keys(labels.ForNode(snap)))
	slices.Sort(allowed)
	if !slices.Equal(allowed, produced) {
		t.Errorf("the policy's ownedLabels %v, the agent's labels %v", allowed, produced)
	}
}
