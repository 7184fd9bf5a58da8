package cli

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/conformance/incluster"
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

// The shipped nightly CronJob runs the runner's own pod: the same
// ServiceAccount, security, volumes and image policy as the Job submit
// makes, so what the preflight and the restricted-Pod-Security test prove
// for one holds for the other. Only the arguments differ (the night runs
// `nightly`, no run ID and no results ConfigMap: a night pushes to a
// Pushgateway and compares with its baseline).
func TestNightlyCronJobRunsTheRunnersPod(t *testing.T) {
	cj := renderShippedNightly(t).cronJob
	if cj.Namespace != incluster.DefaultNamespace || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("namespace %q, concurrency %q; want %s and Forbid", cj.Namespace, cj.Spec.ConcurrencyPolicy, incluster.DefaultNamespace)
	}
	night := cj.Spec.JobTemplate.Spec
	if night.BackoffLimit == nil || *night.BackoffLimit != 0 {
		t.Errorf("backoffLimit %v, want 0: a retry runs the scenarios twice", night.BackoffLimit)
	}
	got := night.Template.Spec.DeepCopy()
	want := incluster.Job(incluster.Options{Image: got.Containers[0].Image, RunID: "x"}).Spec.Template.Spec
	args := got.Containers[0].Args
	got.Containers[0].Args, want.Containers[0].Args = nil, nil
	if !equality.Semantic.DeepEqual(*got, want) {
		t.Errorf("the nightly pod differs from the runner's:\n got %+v\nwant %+v", *got, want)
	}
	for _, a := range []string{"nightly", "--profile=cluster", "--out=/results"} {
		if !slices.Contains(args, a) {
			t.Errorf("args %v lack %s", args, a)
		}
	}
}
