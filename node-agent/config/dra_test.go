package config_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpulab/gpulab/node-agent/dra"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestDRAComponent: the dra component turns DRA mode on (and not the
// device plugin), mounts the kubelet's plugin folders and the CDI folder
// from the host at the paths the agent uses by default, binds the agent's
// service account to ResourceSlice and ResourceClaim access, and ships the
// DeviceClass the testbeds create; a real API server admits it all and the
// pod in the component's privileged namespace.
func TestDRAComponent(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{
		CRDDirs: []string{filepath.Join("..", "..", "operator", "config", "crd", "bases", "gpulab.io_gpuinventories.yaml")},
	})
	bins, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs := renderWithComponent(t, bins.Kubectl, "dra")
	if ns := find(t, objs, "Namespace"); ns.GetLabels()[enforce] != "privileged" {
		t.Errorf("namespace %s enforces %q, want privileged", ns.GetName(), ns.GetLabels()[enforce])
	}
	ds := daemonSet(t, objs)
	c := ds.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--dra-driver="+dra.DefaultDriverName) || slices.Contains(c.Args, "--device-plugin") {
		t.Errorf("args %v: want --dra-driver=%s and no device plugin", c.Args, dra.DefaultDriverName)
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = hostPaths[m.Name]
	}
	for _, want := range []string{"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"} {
		if mounts[want] != want {
			t.Errorf("%s: mounted from host path %q, want the host's own (mounts %v)", want, mounts[want], mounts)
		}
	}
	var subjects []any
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" && o.GetName() == "gpulab-agent-dra" {
			subjects, _, _ = unstructured.NestedSlice(o.Object, "subjects")
		}
	}
	if len(subjects) != 1 || subjects[0].(map[string]any)["namespace"] != ds.Namespace {
		t.Errorf("gpulab-agent-dra binds %v: want the agent's service account in %s", subjects, ds.Namespace)
	}
	var shipped resourceapi.DeviceClass
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "DeviceClass").Object, &shipped); err != nil {
		t.Fatal(err)
	}
	if want := dra.DeviceClass(dra.DefaultDriverName); shipped.Name != want.Name || !equality.Semantic.DeepEqual(shipped.Spec, want.Spec) {
		t.Errorf("the shipped DeviceClass %+v differs from the testbeds' %+v", shipped.Spec, want.Spec)
	}
	apply(t, env.Client, objs)
	admitAgentPod(t, env.Client, objs)
}
