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

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
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
	for kind, n := range map[string]int{"CustomResourceDefinition": 3, "Deployment": 1, "ClusterRole": 5, "PodDisruptionBudget": 1, "Service": 1, "ServiceAccount": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s objects, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
	checkAccess(t, env.Client)
}

// access is one question for the API server's authorizer.
type access struct {
	user, namespace, group, resource, name, verb string
	allowed                                      bool
}

// checkAccess asks the API server's RBAC authorizer what the applied roles
// allow: the operator elects its leader and records core Events, but cannot
// write an agent's heartbeat Lease; gpulab-editor and gpulab-viewer carry
// the labels that fold them into edit, admin and view.
func checkAccess(t *testing.T, c client.Client) {
	t.Helper()
	const operator = "system:serviceaccount:gpulab-system:gpulab-operator"
	for _, a := range []access{
		{operator, "gpulab-system", "coordination.k8s.io", "leases", "", "create", true},
		{operator, "gpulab-system", "coordination.k8s.io", "leases", "gpulab-operator.gpulab.io", "update", true},
		{operator, "gpulab-system", "coordination.k8s.io", "leases", "gpulab-operator.gpulab.io", "get", true},
		{operator, "gpulab-system", "coordination.k8s.io", "leases", "gpu-node-1", "get", true},
		{operator, "gpulab-system", "coordination.k8s.io", "leases", "gpu-node-1", "update", false},
		{operator, "gpulab-system", "coordination.k8s.io", "leases", "gpu-node-1", "delete", false},
		{operator, "gpulab-system", "", "events", "", "create", true},
		{operator, "gpulab-system", "events.k8s.io", "events", "", "create", true},
		// Karpenter's NodePools are read for capacity that can come, never
		// written: the autoscaler is the cluster's.
		{operator, "", "karpenter.sh", "nodepools", "", "list", true},
		{operator, "", "karpenter.sh", "nodepools", "", "watch", true},
		{operator, "", "karpenter.sh", "nodepools", "gpu", "update", false},
		{operator, "", "karpenter.sh", "nodepools", "", "create", false},
		{operator, "", "karpenter.sh", "nodeclaims", "", "create", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: a.user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.namespace, Group: a.group, Resource: a.resource, Name: a.name, Verb: a.verb,
			},
		}}
		if err := c.Create(context.Background(), sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != a.allowed {
			t.Errorf("%s may %s %s/%s %q in %s: %v, want %v", a.user, a.verb, a.group, a.resource, a.name, a.namespace, sar.Status.Allowed, a.allowed)
		}
	}
	for name, labels := range map[string][]string{
		"gpulab-editor": {"rbac.authorization.k8s.io/aggregate-to-edit", "rbac.authorization.k8s.io/aggregate-to-admin"},
		"gpulab-viewer": {"rbac.authorization.k8s.io/aggregate-to-view"},
	} {
		var role rbacv1.ClusterRole
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &role); err != nil {
			t.Fatal(err)
		}
		for _, l := range labels {
			if role.Labels[l] != "true" {
				t.Errorf("ClusterRole %s lacks the label %s=true", name, l)
			}
		}
	}
}
