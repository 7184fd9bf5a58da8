package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	pollutil "github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// renderOverlay renders the overlay node-agent/README.md documents for a
// namespace of the agent's own: node-agent/config in namespace, with the
// named component ("" for none).
func renderOverlay(t *testing.T, kubectl, namespace, component string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	config, err := filepath.Abs(filepath.Join("..", "..", "config"))
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes only relative paths.
	rel, err := filepath.Rel(dir, config)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources: [%s]\n", namespace, rel)
	if component != "" {
		k += fmt.Sprintf("components: [%s]\n", filepath.Join(rel, component))
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kustomize: %v", err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			break
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
	return objs
}

// podFlags parses the DaemonSet's arguments as its pod on node would: with
// the container's environment, the downward API's fields resolved.
func podFlags(t *testing.T, ds *appsv1.DaemonSet, node string) *runFlags {
	t.Helper()
	c := ds.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		v := e.Value
		if r := e.ValueFrom; r != nil && r.FieldRef != nil {
			switch r.FieldRef.FieldPath {
			case "metadata.namespace":
				v = ds.Namespace
			case "spec.nodeName":
				v = node
			default:
				t.Fatalf("env %s: field %s is not resolved here", e.Name, r.FieldRef.FieldPath)
			}
		}
		t.Setenv(e.Name, v)
	}
	var f runFlags
	fs := flag.NewFlagSet("gpulab-agent", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatal(err)
	}
	if err := f.validate(fs); err != nil {
		t.Fatalf("the DaemonSet's arguments %v: %v", c.Args, err)
	}
	return &f
}

// TestDocumentedOverlayWritesItsLease: installed into a namespace of its
// own, as node-agent/README.md documents (gpulab-agent, alone or with the
// device-plugin or volume-mounts component), the agent keeps its heartbeat
// Lease in that namespace, where its Role is, and may write it there as its
// service account.
func TestDocumentedOverlayWritesItsLease(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{
		CRDDirs: []string{filepath.Join("..", "..", "..", "operator", "config", "crd", "bases", "gpulab.io_gpuinventories.yaml")},
	})
	bins, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ns, node = "gpulab-agent", "gpu-node-1"
	for _, component := range []string{"device-plugin", "volume-mounts"} {
		objs := renderOverlay(t, bins.Kubectl, ns, component)
		if f := podFlags(t, daemonSetOf(t, objs), node); f.leaseNamespace != ns {
			t.Errorf("with the %s component: --lease-namespace %q, want the pod's namespace %s", component, f.leaseNamespace, ns)
		}
	}

	objs := renderOverlay(t, bins.Kubectl, ns, "")
	ds := daemonSetOf(t, objs)
	f := podFlags(t, ds, node)
	for _, o := range objs {
		if o.GetKind() == "Role" && o.GetNamespace() != f.leaseNamespace {
			t.Errorf("Role %s/%s, but --lease-namespace %q", o.GetNamespace(), o.GetName(), f.leaseNamespace)
		}
	}
	ctx := context.Background()
	for _, o := range objs {
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
			client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}

	// The agent's pod-bound service-account token.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ds.Namespace + ":" + ds.Spec.Template.Spec.ServiceAccountName,
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: publisher.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	p := publisher.New(c, publisher.Options{LeaseNamespace: f.leaseNamespace, HeartbeatPeriod: time.Second, LabelNode: f.labelNode})
	st := publisher.State{Status: v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08"}}
	if err := pollutil.Until(ctx, 30*time.Second, func() (bool, string) {
		err := p.Publish(ctx, node, st)
		var l coordinationv1.Lease
		lerr := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: node}, &l)
		return err == nil && lerr == nil, fmt.Sprintf("publish: %v; lease %s/%s: %v", err, ns, node, lerr)
	}); err != nil {
		t.Fatalf("the agent's heartbeat in namespace %s: %v", ns, err)
	}
}

func daemonSetOf(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
			t.Fatal(err)
		}
		return &ds
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}
