package profile

import (
	"context"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpulab/gpulab/internal/scheme"
)

func TestKubeRayUsesVolcano(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/manager", "--batch-scheduler=volcano"}, true},
		{[]string{"--batch-scheduler", "volcano"}, true},
		{[]string{"-batch-scheduler=volcano"}, true},
		{[]string{"--enable-batch-scheduler"}, true},
		{[]string{"--batch-scheduler=yunikorn"}, false},
		{[]string{"--enable-batch-scheduler=false"}, false},
		{[]string{"/manager", "--leader-election-namespace=ray"}, false},
		{nil, false},
	} {
		if got := KubeRayUsesVolcano(tc.args); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.args, got, tc.want)
		}
	}
}

// A preflight per stack: native gangs (--scheduler=kubernetes) do not need
// Volcano's CRDs for GPUClusters, but KubeRay's, Volcano's Jobs and the
// bare floor are Volcano's gangs whatever the flag; the hint names
// pinned releases, never a floating tag.
func TestMissingCRDsPerScheduler(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	gpulab := []string{"gpuclusters.gpulab.io", "gpuinventories.gpulab.io"}
	volcano := []string{"podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh"}
	for _, tc := range []struct {
		workload string
		native   bool
		want     []string
	}{
		{"gpucluster", false, append(slices.Clone(gpulab), volcano...)},
		{"gpucluster", true, gpulab},
		{"bare", true, volcano},
		{"vcjob", true, append([]string{"jobs.batch.volcano.sh"}, volcano...)},
	} {
		missing, _, err := missingCRDs(context.Background(), c, tc.workload, tc.native)
		if err != nil || !slices.Equal(missing, tc.want) {
			t.Errorf("%s, native gangs %v: missing %v (%v), want %v", tc.workload, tc.native, missing, err, tc.want)
		}
		hint := installHint(tc.workload, tc.native)
		if strings.Contains(hint, ":latest") || !strings.Contains(hint, "v") || tc.native && tc.workload == "gpucluster" && strings.Contains(hint, "Volcano") {
			t.Errorf("%s, native gangs %v: hint %q", tc.workload, tc.native, hint)
		}
	}
}
