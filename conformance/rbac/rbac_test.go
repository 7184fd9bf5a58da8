package rbac

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite conformance/config/clusterrole.yaml and admission-policy.yaml, and the chart's policy, from this package")

const shipped = "../config/clusterrole.yaml"

// clusterRoleYAML is the shipped file's content: each rule's reason as a
// comment, then the ClusterRole.
func clusterRoleYAML(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("# Generated from conformance/rbac (go test ./conformance/rbac/ -update): do not edit.\n# Why each rule:\n")
	for _, r := range Rules() {
		g := r.Group
		if g == "" {
			g = "core"
		}
		res := r.Resource
		if len(r.ResourceNames) > 0 {
			res += " " + fmt.Sprint(r.ResourceNames)
		}
		fmt.Fprintf(&b, "#   %s %s %v: %s\n", g, res, r.Verbs, r.Why)
	}
	out, err := yaml.Marshal(ClusterRole())
	if err != nil {
		t.Fatal(err)
	}
	b.Write(out)
	return b.Bytes()
}

func TestShippedClusterRoleIsGenerated(t *testing.T) {
	want := clusterRoleYAML(t)
	if *update {
		if err := os.WriteFile(shipped, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Clean(shipped))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from conformance/rbac's Rules: run go test ./conformance/rbac/ -update", shipped)
	}
}

// golden compares path with want, rewriting it first under -update.
func golden(t *testing.T, path string, want []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from conformance/rbac: run go test ./conformance/rbac/ -update", path)
	}
}

// The role grants no write beyond create and delete, but an update of the
// Leases the admission policy confines (the run lock is renewed), nothing
// on secrets, and no wildcard: what a platform team reviews for.
func TestRulesAreLeastPrivilege(t *testing.T) {
	confinesLeaseUpdates := false
	for _, r := range AdmissionPolicy(Confinement{}).Spec.MatchConstraints.ResourceRules {
		if slices.Contains(r.Resources, "leases") && slices.Contains(r.Operations, "UPDATE") {
			confinesLeaseUpdates = true
		}
	}
	for _, r := range Rules() {
		for _, v := range r.Verbs {
			switch {
			case v == "get", v == "list", v == "watch", v == "create", v == "delete":
			case v == "update" && r.Group == "coordination.k8s.io" && r.Resource == "leases" && confinesLeaseUpdates:
			default:
				t.Errorf("%s %s: verb %q", r.Group, r.Resource, v)
			}
		}
		if r.Resource == "secrets" || r.Resource == "*" || r.Group == "*" || r.Resource == "configmaps" && len(r.ResourceNames) == 0 {
			t.Errorf("rule on %s/%s", r.Group, r.Resource)
		}
		if r.Why == "" {
			t.Errorf("%s %s: no reason given", r.Group, r.Resource)
		}
	}
}
