package v1alpha1_test

import (
	"fmt"
	"regexp"
	"testing"

	v1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// TestPodNamesNeverCollide enumerates every cluster and group name the
// schema accepts over a small alphabet, and every pod each would create:
// no two (cluster, group, index) share a pod name. With a '-' allowed in
// group names, cluster "a" group "x-w1" and cluster "a-x" group "w1" would.
func TestPodNamesNeverCollide(t *testing.T) {
	clusterRule := regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	groupRule := regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	var names []string
	var grow func(prefix string)
	grow = func(prefix string) {
		if prefix != "" {
			names = append(names, prefix)
		}
		if len(prefix) == 4 {
			return
		}
		for _, c := range "a1-" {
			grow(prefix + string(c))
		}
	}
	grow("")
	owner := map[string]string{}
	claim := func(pod, who string) {
		if other, ok := owner[pod]; ok && other != who {
			t.Fatalf("pod name %s wanted by %s and by %s", pod, other, who)
		}
		owner[pod] = who
	}
	clusters, groups := 0, 0
	for _, cluster := range names {
		if !clusterRule.MatchString(cluster) {
			continue
		}
		clusters++
		claim(v1.HeadPodName(cluster), cluster+"/head")
		for _, group := range names {
			if !groupRule.MatchString(group) || group == v1.HeadGroupName {
				continue
			}
			groups++
			for _, i := range []int32{0, 1, 10, 11} {
				claim(v1.WorkerPodName(cluster, group, i), fmt.Sprintf("%s/%s/%d", cluster, group, i))
			}
		}
	}
	if clusters < 20 || groups < 100 {
		t.Fatalf("enumerated only %d clusters and %d groups", clusters, groups)
	}
	// The rule the schema forbids is exactly what makes names collide.
	if v1.WorkerPodName("a", "x-w1", 0) != v1.WorkerPodName("a-x", "w1", 0) {
		t.Fatal("the example collision no longer collides: update the comment on WorkerGroupSpec.Name")
	}
}
