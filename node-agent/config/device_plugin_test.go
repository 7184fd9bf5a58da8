package config_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpulab/gpulab/node-agent/internal/deviceplugin"
	"github.com/gpulab/gpulab/node-agent/internal/podresources"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestDevicePluginComponent: the device-plugin component turns the mode on,
// mounts the kubelet's directories where the agent's flags look by default,
// runs as root and takes a privileged namespace of its own, which admits the
// pod; the restricted namespace refuses it.
func TestDevicePluginComponent(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{
		CRDDirs: []string{filepath.Join("..", "..", "operator", "config", "crd", "bases", "gpulab.io_gpuinventories.yaml")},
	})
	bins, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs := renderWithComponent(t, bins.Kubectl, "device-plugin")
	if ns := find(t, objs, "Namespace"); ns.GetName() != "gpulab-agent" || ns.GetLabels()[enforce] != "privileged" {
		t.Errorf("namespace %s enforces %q, want gpulab-agent, privileged", ns.GetName(), ns.GetLabels()[enforce])
	}
	ds := daemonSet(t, objs)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--device-plugin") || !slices.Contains(c.Args, "--metrics-secure=true") {
		t.Errorf("args %v: want --device-plugin beside the shipped ones", c.Args)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--advertise-capacity") {
			t.Errorf("args %v: the kubelet sets capacity from the plugin", c.Args)
		}
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if m.ReadOnly {
			t.Errorf("mount %s is read-only: the agent makes its socket there and dials the kubelet's", m.MountPath)
		}
		mounts[filepath.Clean(m.MountPath)] = hostPaths[m.Name]
	}
	for _, want := range []string{filepath.Clean(deviceplugin.DefaultDir), filepath.Dir(podresources.DefaultSocket)} {
		if mounts[want] != want {
			t.Errorf("%s: mounted from host path %q, want the host's own (mounts %v)", want, mounts[want], mounts)
		}
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot {
		t.Errorf("pod security context %+v: want root, for the kubelet's sockets", sc)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("container security context %+v: want no privilege escalation and no capabilities", sc)
	}
	apply(t, env.Client, objs)
	admitAgentPod(t, env.Client, objs)

	// The shipped, restricted namespace.
	shipped := find(t, render(t, bins.Kubectl, "."), "Namespace")
	apply(t, env.Client, []*unstructured.Unstructured{shipped})
	pod := agentPod(ds, shipped.GetName())
	if err := env.Client.Create(context.Background(), pod); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("the device-plugin pod in a restricted namespace: %v", err)
	}
}
