// Package config_test checks the operator's install manifests against a
// real API server: they render with kustomize, apply server-side, and the
// RBAC stays least-privilege.
package config_test

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/testbeds/envtest"
	"github.com/gpulab/gpulab/testbeds/local/binaries"
)

func TestManifestsApplyAndStayLeastPrivilege(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{"crd/bases"}})
	bins, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bins.Kubectl, "kustomize", "default").Output()
	if err != nil {
		t.Fatalf("kustomize: %v", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	kinds := map[string]int{}
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			break
		}
		if len(obj.Object) == 0 {
			continue
		}
		kinds[obj.GetKind()]++
		if err := env.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Errorf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "ClusterRole" || obj.GetKind() == "Role" {
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
				t.Fatal(err)
			}
			for _, rule := range role.Rules {
				if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
					t.Errorf("%s %s has a wildcard rule: %+v", obj.GetKind(), obj.GetName(), rule)
				}
			}
		}
	}
	for kind, n := range map[string]int{"CustomResourceDefinition": 3, "Deployment": 1, "ClusterRole": 3, "Service": 1, "ServiceAccount": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s objects, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
}
