package charts

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// rbacSources are the kustomize manifests whose RBAC the chart renders:
// controller-gen's role.yaml, the hand-written roles and bindings, the
// agent's, the testbed capacity role, the monitors' metrics reader and the
// conformance suite's role and binding (the conformance runner's).
var rbacSources = []string{
	"operator/config/rbac/role.yaml",
	"operator/config/rbac/leader_election_role.yaml",
	"operator/config/rbac/agent_heartbeat_role.yaml",
	"operator/config/rbac/metrics_auth_role.yaml",
	"operator/config/rbac/aggregate_roles.yaml",
	"operator/config/rbac/bindings.yaml",
	"node-agent/config/rbac.yaml",
	"node-agent/config/testbed/rbac-capacity.yaml",
	"node-agent/config/dra/access/rbac.yaml",
	"dashboards/prometheus/operator/metrics-reader.yaml",
	"conformance/config/clusterrole.yaml",
	"conformance/config/clusterrolebinding.yaml",
}

// ownSubjectNamespace are the bindings whose kustomize subjects live in a
// namespace of their own, by the namespace they name there: conformance/config
// binds the ServiceAccount in its gpulab-conformance namespace, the chart the
// one it creates in the release namespace. Only that namespace may differ.
var ownSubjectNamespace = map[string]string{
	"ClusterRoleBinding/gpulab-conformance": "gpulab-conformance",
}

// TestRBACEqualsKustomize: every Role, ClusterRole and binding the chart
// renders has the rules (or roleRef and subjects) of the kustomize object
// of the same name, so regenerating role.yaml without updating the chart
// fails here. Both the default and the everything-on values are checked.
// Subjects are compared namespace and all, but for ownSubjectNamespace's
// bindings, whose subjects must sit in the release namespace instead.
func TestRBACEqualsKustomize(t *testing.T) {
	want := map[string]*unstructured.Unstructured{}
	for _, f := range rbacSources {
		for _, o := range decodeFile(t, repo(f)) {
			if isRBAC(o.GetKind()) {
				want[o.GetKind()+"/"+o.GetName()] = o
			}
		}
	}
	ch := loadChart(t)
	seen := map[string]bool{}
	for name, vals := range map[string]map[string]any{
		"defaults":      nil,
		"everything on": values(t, everythingOn),
		// Leader election is off in everythingOn; its Role is checked here.
		"monitors with leader election": values(t, "monitoring: {serviceMonitor: {enabled: true}}\nagent: {advertiseCapacity: true}"),
		"dra":                           values(t, draOn),
	} {
		t.Run(name, func(t *testing.T) {
			r := render(t, ch, vals)
			for _, got := range r.objects {
				if !isRBAC(got.GetKind()) {
					continue
				}
				key := got.GetKind() + "/" + got.GetName()
				w, ok := want[key]
				if !ok {
					t.Errorf("%s has no counterpart in %v", key, rbacSources)
					continue
				}
				seen[key] = true
				if got.GetKind() == "Role" || got.GetKind() == "ClusterRole" {
					same(t, key+" rules", rules(t, got), rules(t, w))
					continue
				}
				var g, wb rbacv1.ClusterRoleBinding
				into(t, withoutNamespace(got), &g)
				into(t, withoutNamespace(w), &wb)
				same(t, key+" roleRef", g.RoleRef, wb.RoleRef)
				if own, ok := ownSubjectNamespace[key]; ok {
					for i, s := range wb.Subjects {
						if s.Namespace != own {
							t.Errorf("%s: the kustomize subject %s/%s is no longer in %s: update ownSubjectNamespace", key, s.Namespace, s.Name, own)
						}
						wb.Subjects[i].Namespace = namespace
					}
				}
				same(t, key+" subjects", g.Subjects, wb.Subjects)
			}
		})
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("%s (kustomize) is never rendered by the chart", key)
		}
	}
	// No wildcard anywhere: least privilege, as operator/config's test asks.
	for key, o := range want {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		for _, rule := range rules(t, o) {
			if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
				t.Errorf("%s has a wildcard rule: %+v", key, rule)
			}
		}
	}
}

func isRBAC(kind string) bool {
	return kind == "Role" || kind == "ClusterRole" || kind == "RoleBinding" || kind == "ClusterRoleBinding"
}

func rules(t *testing.T, o *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole
	into(t, withoutNamespace(o), &role)
	if len(role.Rules) == 0 {
		t.Fatalf("%s %s has no rules", o.GetKind(), o.GetName())
	}
	return role.Rules
}

// withoutNamespace lets a Role decode as a ClusterRole (and a RoleBinding
// as a ClusterRoleBinding): the fields compared are the same.
func withoutNamespace(o *unstructured.Unstructured) *unstructured.Unstructured {
	c := o.DeepCopy()
	c.SetNamespace("")
	return c
}
