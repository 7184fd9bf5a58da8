package incluster_test

import (
	"os"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/conformance/incluster"
)

// The shipped nightly CronJob runs the runner's own pod: the same
// ServiceAccount, security, volumes and image policy as the Job submit
// makes, so what the preflight and the restricted-Pod-Security test prove
// for one holds for the other. Only the arguments differ (the night runs
// `nightly`, no run ID and no results ConfigMap: a night pushes to a
// Pushgateway and compares with its baseline).
func TestNightlyCronJobRunsTheRunnersPod(t *testing.T) {
	data, err := os.ReadFile("../config/nightly/cronjob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cj batchv1.CronJob
	if err := yaml.UnmarshalStrict(data, &cj); err != nil {
		t.Fatalf("cronjob.yaml: %v", err)
	}
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
