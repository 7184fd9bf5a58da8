package publisher_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
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
	if _, ok := b.Status.Capacity[publisher.GPUResource]; ok {
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
	if err := agentA.Patch(ctx(t), relabel, client.MergeFrom(&a)); !denied(err, "only change nvidia.com/ labels") {
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
