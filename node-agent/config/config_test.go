// Package config_test checks the agent's install manifests against a real
// API server, which enforces Pod Security admission.
package config_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

const enforce = "pod-security.kubernetes.io/enforce"

// TestAgentPodSecurity: the shipped namespace enforces the restricted Pod
// Security level and admits the agent's pods; the volume-mounts component,
// whose /dev/null hostPath only privileged admits, takes a namespace of its
// own with it.
func TestAgentPodSecurity(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{
		CRDDirs: []string{filepath.Join("..", "..", "operator", "config", "crd", "bases", "gpulab.io_gpuinventories.yaml")},
	})
	bins, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("shipped", func(t *testing.T) {
		objs := render(t, bins.Kubectl, ".")
		ns := find(t, objs, "Namespace")
		if level := ns.GetLabels()[enforce]; level != "restricted" {
			t.Errorf("namespace %s enforces %q, want restricted", ns.GetName(), level)
		}
		apply(t, env.Client, objs)
		admitAgentPod(t, env.Client, objs)
	})

	t.Run("volume-mounts component", func(t *testing.T) {
		objs := renderWithComponent(t, bins.Kubectl, "volume-mounts")
		ns := find(t, objs, "Namespace")
		if ns.GetName() != "gpulab-agent" || ns.GetLabels()[enforce] != "privileged" {
			t.Errorf("namespace %s enforces %q, want gpulab-agent, privileged", ns.GetName(), ns.GetLabels()[enforce])
		}
		ds := daemonSet(t, objs)
		if v := ds.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].HostPath == nil || v[0].HostPath.Path != "/dev/null" {
			t.Errorf("volumes: %+v", v)
		}
		apply(t, env.Client, objs)
		admitAgentPod(t, env.Client, objs)

		// The same pod in the operator's restricted namespace is refused.
		pod := agentPod(ds, "gpulab-system")
		err := env.Client.Create(context.Background(), pod)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "hostPath") {
			t.Errorf("a pod with the /dev/null hostPath in a restricted namespace: %v", err)
		}
	})
}

// render runs kubectl kustomize on dir.
func render(t *testing.T, kubectl, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
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

func find(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

func daemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "DaemonSet").Object, &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}

func apply(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
			client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// agentPod is the pod the DaemonSet would create on a node, in namespace.
func agentPod(ds *appsv1.DaemonSet, namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gpulab-agent-", Namespace: namespace, Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
}

// admitAgentPod creates the DaemonSet's pod in the DaemonSet's namespace:
// Pod Security admission runs on pods, not on DaemonSets.
func admitAgentPod(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ds := daemonSet(t, objs)
	pod := agentPod(ds, ds.Namespace)
	pod.Spec.NodeName = "gpu-node"
	// The service account admission needs the account to exist, which the
	// API server may take a moment to see.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Create(context.Background(), pod)
		if err == nil {
			return
		}
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity") || time.Now().After(deadline) {
			t.Fatalf("the agent's pod in namespace %s: %v", ds.Namespace, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// renderWithComponent renders this directory with one of its kustomize
// components, in an overlay placed in the gpulab-agent namespace.
func renderWithComponent(t *testing.T, kubectl, component string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(dir, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	overlay := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: gpulab-agent\n" +
		"resources: [" + rel(".") + "]\ncomponents: [" + rel(component) + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	return render(t, kubectl, dir)
}
