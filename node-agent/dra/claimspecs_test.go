package dra

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// startOnN1 starts the plugin for node n1 with 4 healthy GPUs, its CDI
// specs in cdiDir and its sockets in a fresh folder; it stops with the
// test.
func startOnN1(ctx context.Context, t *testing.T, kube kubernetes.Interface, cdiDir string) *Plugin {
	t.Helper()
	root, err := os.MkdirTemp("", "dra") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	reg, plug := filepath.Join(root, "reg"), filepath.Join(root, "plug")
	for _, d := range []string{reg, plug} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p, err := StartPlugin(ctx, PluginOptions{Node: "n1", Kube: kube, CDIDir: cdiDir, RegistrarDir: reg, PluginDir: plug, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := p.Update(ctx, gpus(4)); err != nil {
		t.Fatal(err)
	}
	return p
}

// prepareOne prepares c as the kubelet would.
func prepareOne(ctx context.Context, t *testing.T, p *Plugin, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	out, err := p.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return out[c.UID]
}

// n1 is the node the plugin publishes for.
var n1 = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}

func specExists(t *testing.T, dir string, uid types.UID) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(dir, claimSpecFile(uid)))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// A spec in the folder that cannot be read (here: not JSON) is skipped,
// not a reason to refuse every later claim on the node, and left in
// place.
func TestCorruptSpecDoesNotBlockPrepare(t *testing.T) {
	ctx := t.Context()
	cdiDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cdiDir, claimSpecFile("broken")), []byte(`{"cdiVersion": "0.`), 0o644); err != nil {
		t.Fatal(err)
	}
	a := claim("a", "uid-a", "n1", "gpu-0")
	p := startOnN1(ctx, t, fake.NewClientset(n1, a), cdiDir)
	if got := prepareOne(ctx, t, p, a); got.Err != nil || len(got.Devices) != 1 {
		t.Fatalf("preparing a beside a corrupt spec: %+v", got)
	}
	if !specExists(t, cdiDir, "broken") {
		t.Error("the corrupt spec was removed; it names no claim to ask about")
	}
}

// At start, the specs of claims that are gone (deleted, replaced by a
// claim of another UID under the name, deallocated) are removed and their
// GPUs can be prepared again; a spec whose claim still holds this node's
// GPU stays, as do specs that do not name their claim or cannot be read.
func TestStaleSpecsRemovedAtStart(t *testing.T) {
	ctx := t.Context()
	cdiDir := t.TempDir()
	gone, kept := claim("gone", "uid-gone", "n1", "gpu-0"), claim("kept", "uid-kept", "n1", "gpu-1")
	replaced, freed := claim("replaced", "uid-replaced", "n1", "gpu-2"), claim("freed", "uid-freed", "n1", "gpu-3")
	kube := fake.NewClientset(n1, gone, kept, replaced, freed)

	// An agent prepared them, then stopped.
	first, cancel := context.WithCancel(ctx)
	p := startOnN1(first, t, kube, cdiDir)
	for _, c := range []*resourceapi.ResourceClaim{gone, kept, replaced, freed} {
		if got := prepareOne(ctx, t, p, c); got.Err != nil {
			t.Fatalf("preparing %s: %v", c.Name, got.Err)
		}
	}
	p.Stop()
	cancel()

	// Meanwhile: gone deleted, replaced recreated, freed deallocated.
	claims := kube.ResourceV1().ResourceClaims("ns")
	for _, name := range []string{"gone", "replaced"} {
		if err := claims.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := claims.Create(ctx, claim("replaced", "uid-new", "n1", "gpu-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deallocated := freed.DeepCopy()
	deallocated.Status.Allocation = nil
	if _, err := claims.UpdateStatus(ctx, deallocated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A spec of an older agent, which did not name its claim, and a corrupt one.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	legacy := &specs.Spec{Version: specs.CurrentVersion, Kind: "k8s." + DefaultDriverName + "/claim",
		Annotations: map[string]string{devicesAnnotation: "gpu-3"},
		Devices:     []specs.Device{{Name: "uid-legacy-gpus", ContainerEdits: specs.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=GPU-dddddddd"}}}}}
	if err := cache.WriteSpec(legacy, claimSpecFile("uid-legacy")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdiDir, claimSpecFile("broken")), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}

	p = startOnN1(ctx, t, kube, cdiDir)
	for uid, want := range map[types.UID]bool{"uid-gone": false, "uid-replaced": false, "uid-freed": false,
		"uid-kept": true, "uid-legacy": true, "broken": true} {
		if got := specExists(t, cdiDir, uid); got != want {
			t.Errorf("after the restart, the spec of %s exists: %v, want %v", uid, got, want)
		}
	}
	// gpu-0 is free again; gpu-1 is still kept's.
	if got := prepareOne(ctx, t, p, claim("next", "uid-next", "n1", "gpu-0")); got.Err != nil {
		t.Errorf("preparing the deleted claim's GPU for the next claim: %v", got.Err)
	}
	if got := prepareOne(ctx, t, p, claim("thief", "uid-thief", "n1", "gpu-1")); got.Err == nil {
		t.Error("a second claim got kept's GPU")
	}
}
