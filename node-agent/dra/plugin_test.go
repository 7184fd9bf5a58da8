package dra

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/cdispec"
)

func gpus(n int) *v1alpha1.GPUInventoryStatus {
	st := &v1alpha1.GPUInventoryStatus{}
	for i := range n {
		st.GPUs = append(st.GPUs, v1alpha1.GPUDevice{Index: int32(i), UUID: "GPU-" + strings.Repeat(string(rune('a'+i)), 8),
			Product: "NVIDIA H100 80GB HBM3", Health: v1alpha1.GPUHealth{State: v1alpha1.GPUHealthy}})
	}
	return st
}

func claim(name, uid, pool string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: DefaultDriverName, Pool: pool, Device: d})
	}
	return c
}

// The plugin as the kubelet meets it: registered through the registration
// socket, publishing the node's pool, and preparing claims over its gRPC
// socket into CDI specs that a runtime's CDI library resolves into
// exactly the claim's GPUs. A GPU prepared for one claim is refused to
// another until unprepared, and a claim on another node's pool is refused.
func TestPluginPreparesClaimsForTheKubelet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root, err := os.MkdirTemp("", "dra") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	reg, plug, cdiDir := filepath.Join(root, "reg"), filepath.Join(root, "plug"), filepath.Join(root, "cdi")
	for _, d := range []string{reg, plug} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	st := gpus(4)
	st.GPUs[3].Health.State = v1alpha1.GPUUnhealthy
	a, b := claim("a", "uid-a", "n1", "gpu-0", "gpu-1"), claim("b", "uid-b", "n1", "gpu-1", "gpu-2")
	away := claim("away", "uid-away", "n2", "gpu-0")
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}, a, b, away)

	p, err := StartPlugin(ctx, PluginOptions{Node: "n1", Kube: kube, CDIDir: cdiDir, RegistrarDir: reg, PluginDir: plug, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.Update(ctx, st); err != nil {
		t.Fatal(err)
	}
	// The mock GPUs' own spec, as --cdi-spec-dir writes it.
	w, err := cdispec.NewWriter(cdiDir, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	var mock []cdispec.GPU
	for _, g := range st.GPUs {
		mock = append(mock, cdispec.GPU{UUID: g.UUID, Index: int(g.Index)})
	}
	if err := w.Write(mock); err != nil {
		t.Fatal(err)
	}

	// The pool: the healthy GPUs, in a slice owned by the Node.
	deadline := time.Now().Add(30 * time.Second)
	for {
		slices, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(slices.Items) == 1 {
			s := slices.Items[0]
			if s.Spec.Pool.Name != "n1" || len(s.Spec.Devices) != 3 || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "node-uid" {
				t.Fatalf("slice %+v, want n1's pool of 3 healthy GPUs owned by the Node", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slices published within 30s, want 1", len(slices.Items))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Registration: what the kubelet asks first.
	rc := dial(t, filepath.Join(reg, DefaultDriverName+"-reg.sock"))
	info, err := registerapi.NewRegistrationClient(rc).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != DefaultDriverName || info.Endpoint != filepath.Join(plug, "dra.sock") {
		t.Fatalf("registration info %+v", info)
	}
	node := drapb.NewDRAPluginClient(dial(t, info.Endpoint))
	prepare := func(c *resourceapi.ResourceClaim) *drapb.NodePrepareResourceResponse {
		t.Helper()
		resp, err := node.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Claims[string(c.UID)]
	}
	unprepare := func(c *resourceapi.ResourceClaim) {
		t.Helper()
		resp, err := node.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
		if err != nil || resp.Claims[string(c.UID)].Error != "" {
			t.Fatalf("unprepare %s: %v %+v", c.Name, err, resp)
		}
	}

	got := prepare(a)
	if got.Error != "" || len(got.Devices) != 2 {
		t.Fatalf("prepare a: %+v", got)
	}
	var ids []string
	for _, d := range got.Devices {
		ids = append(ids, d.CdiDeviceIds...)
	}
	// What a runtime does with them: the claim's GPUs' device nodes and
	// its UUIDs, nothing of the other GPUs.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ctr := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(ctr, ids...); err != nil {
		t.Fatalf("injecting %v: %v (unresolved %v)", ids, err, unresolved)
	}
	var nodes []string
	for _, d := range ctr.Linux.Devices {
		nodes = append(nodes, d.Path)
	}
	wantEnv := "NVIDIA_VISIBLE_DEVICES=" + st.GPUs[0].UUID + "," + st.GPUs[1].UUID
	if !slices.Equal(nodes, []string{"/dev/nvidia0", "/dev/nvidia1"}) || !slices.Contains(ctr.Process.Env, wantEnv) {
		t.Errorf("the container gets device nodes %v and env %v; want /dev/nvidia0, /dev/nvidia1 and %s", nodes, ctr.Process.Env, wantEnv)
	}
	if again := prepare(a); again.Error != "" {
		t.Errorf("preparing a again (the kubelet retries): %s", again.Error)
	}

	if got := prepare(b); !strings.Contains(got.Error, "device gpu-1 is prepared for claim uid-a") {
		t.Errorf("b shares gpu-1 with a, prepared: %+v", got)
	}
	if got := prepare(away); !strings.Contains(got.Error, "not in this node's pool n1") {
		t.Errorf("a claim on n2's pool: %+v", got)
	}
	// A claim with only another driver's devices has nothing to prepare here.
	other := claim("other", "uid-other", "n1", "gpu-3")
	other.Status.Allocation.Devices.Results[0].Driver = "gpu.nvidia.com"
	if _, err := kube.ResourceV1().ResourceClaims("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := prepare(other); got.Error != "" || len(got.Devices) != 0 {
		t.Errorf("a claim of another driver: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(cdiDir, claimSpecFile("uid-other"))); !os.IsNotExist(err) {
		t.Errorf("a spec was written for another driver's claim: %v", err)
	}
	unprepare(a)
	if _, err := os.Stat(filepath.Join(cdiDir, claimSpecFile("uid-a"))); !os.IsNotExist(err) {
		t.Errorf("a's spec is still there after unprepare: %v", err)
	}
	unprepare(a) // again: nothing to undo
	if got := prepare(b); got.Error != "" {
		t.Errorf("b once a released gpu-1: %s", got.Error)
	}
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
