package cli

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/conformance/results"
)

// The shipped CronJob runs `nightly` with arguments its parser accepts, a
// baseline in its own namespace, and a selection that a cluster without
// --disruptive, --real-gpus, Prometheus or DRA can pass; the Role beside
// it lets its ServiceAccount write and read exactly that baseline.
func TestShippedCronJobRunsNightly(t *testing.T) {
	cj := renderShippedNightly(t).cronJob
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	args := pod.Containers[0].Args
	if len(args) == 0 || args[0] != "nightly" {
		t.Fatalf("args %q, want the nightly command", args)
	}
	o, err := parseNightly(args[1:])
	if err != nil {
		t.Fatalf("the CronJob's args do not parse: %v", err)
	}
	ns, name, err := parseConfigMapSource(o.Baseline)
	if err != nil || ns != cj.Namespace {
		t.Errorf("--baseline=%s: %v; want a ConfigMap in the CronJob's namespace %s", o.Baseline, err, cj.Namespace)
	}
	if o.Run.Profile != "cluster" || o.Out != "/results" || o.Runs < 3 {
		t.Errorf("profile %s, out %s, runs %d: want cluster, the results volume and 3 or more runs", o.Run.Profile, o.Out, o.Runs)
	}
	if o.Run.Requirements == nil || slices.Contains(o.Run.Requirements, results.RequirementSecureAcceleratorAccess) {
		t.Errorf("--requirements=%v: want a selection without secure_accelerator_access (no --real-gpus)", o.Run.Requirements)
	}
	// The Role: create ConfigMaps, get and update only the baseline.
	roleData, err := os.ReadFile("../config/nightly/baseline-role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(roleData, []byte("\n---\n"))
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	if len(docs) != 2 || yaml.UnmarshalStrict(docs[0], &role) != nil || yaml.UnmarshalStrict(docs[1], &binding) != nil {
		t.Fatalf("baseline-role.yaml: want a Role and a RoleBinding")
	}
	can := func(verb string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, verb) &&
				(verb == "create" || slices.Equal(r.ResourceNames, []string{name})) {
				return true
			}
		}
		return false
	}
	for _, verb := range []string{"create", "get", "update"} {
		if !can(verb) {
			t.Errorf("the Role does not let the nightly %s ConfigMap %s: %+v", verb, name, role.Rules)
		}
	}
	if role.Namespace != cj.Namespace || binding.Subjects[0].Name != pod.ServiceAccountName || binding.RoleRef.Name != role.Name {
		t.Errorf("the Role (%s) or its binding (%+v) does not reach the CronJob's ServiceAccount %s", role.Namespace, binding, pod.ServiceAccountName)
	}
	kustomization, err := os.ReadFile("../config/nightly/kustomization.yaml")
	if err != nil || !strings.Contains(string(kustomization), "- baseline-role.yaml") {
		t.Errorf("kustomization.yaml does not apply baseline-role.yaml: %v", err)
	}
}
