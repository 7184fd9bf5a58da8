package sizing

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func rl(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

func container(name string, req corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req}}
}

var always = corev1.ContainerRestartPolicyAlways

func TestEffectiveRequest(t *testing.T) {
	tests := []struct {
		name string
		pod  corev1.PodSpec
		want corev1.ResourceList
	}{
		{
			name: "app containers add up",
			pod: corev1.PodSpec{Containers: []corev1.Container{
				container("a", rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "4")),
				container("b", rl("cpu", "500m", "memory", "512Mi")),
			}},
			want: rl("cpu", "1500m", "memory", "1536Mi", "nvidia.com/gpu", "4"),
		},
		{
			name: "a big init container dominates",
			pod: corev1.PodSpec{
				InitContainers: []corev1.Container{container("init", rl("cpu", "4", "memory", "8Gi"))},
				Containers:     []corev1.Container{container("a", rl("cpu", "1", "memory", "1Gi"))},
			},
			want: rl("cpu", "4", "memory", "8Gi"),
		},
		{
			name: "restartable sidecars count in the app phase and before later init containers",
			pod: corev1.PodSpec{
				InitContainers: []corev1.Container{
					{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1")}},
					container("init", rl("cpu", "2")),
				},
				Containers: []corev1.Container{container("a", rl("cpu", "1"))},
			},
			// app phase: 1 + sidecar 1 = 2; init phase: 2 + sidecar 1 = 3.
			want: rl("cpu", "3"),
		},
		{
			name: "overhead is added",
			pod: corev1.PodSpec{
				Containers: []corev1.Container{container("a", rl("cpu", "1", "memory", "1Gi"))},
				Overhead:   rl("cpu", "250m", "memory", "120Mi"),
			},
			want: rl("cpu", "1250m", "memory", "1144Mi"),
		},
		{
			name: "limits stand in for unset requests",
			pod: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "a", Resources: corev1.ResourceRequirements{Limits: rl("nvidia.com/gpu", "8", "cpu", "2")},
			}}},
			want: rl("nvidia.com/gpu", "8", "cpu", "2"),
		},
		{
			// The case conformance/bare checked on its own copy before it
			// called this package.
			name: "a limit stands in and a bigger init phase still dominates",
			pod: corev1.PodSpec{
				InitContainers: []corev1.Container{container("init", rl("cpu", "2"))},
				Containers: []corev1.Container{{
					Name: "a", Resources: corev1.ResourceRequirements{Limits: rl("cpu", "500m", "nvidia.com/gpu", "2")},
				}},
			},
			want: rl("cpu", "2", "nvidia.com/gpu", "2"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := EffectiveRequest(&corev1.Pod{Spec: tc.pod})
			assertResources(t, got, tc.want)
		})
	}
}

func TestForMembersIsConsistent(t *testing.T) {
	head := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("head", rl("cpu", "2", "memory", "4Gi"))}}}
	worker := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{container("fetch", rl("cpu", "8"))},
		Containers:     []corev1.Container{container("w", rl("cpu", "4", "memory", "16Gi", "nvidia.com/gpu", "8"))},
		Overhead:       rl("memory", "1Gi"),
	}}
	g := ForMembers([]Member{
		{Task: "head", Pod: head, Min: 1},
		{Task: "workers", Pod: worker, Min: 3},
		{Task: "spare", Pod: worker, Min: 0},
	})
	if g.MinMember != 4 {
		t.Errorf("minMember = %d, want 4", g.MinMember)
	}
	if len(g.MinTaskMember) != 2 || g.MinTaskMember["head"] != 1 || g.MinTaskMember["workers"] != 3 {
		t.Errorf("minTaskMember = %v, want head:1 workers:3", g.MinTaskMember)
	}
	// head 2 cpu + 3 × max(4, 8 init) cpu; 4Gi + 3 × (16Gi + 1Gi); 24 GPUs.
	assertResources(t, g.MinResources, rl("cpu", "26", "memory", "55Gi", "nvidia.com/gpu", "24"))
}

// TestTaskMinimumsImplied: a pod count alone (kube-scheduler's minCount)
// enforces the per-task minimums only when at most one task has pods
// beyond its minimum.
func TestTaskMinimumsImplied(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("c", rl("cpu", "1"))}}}
	tests := []struct {
		name    string
		members []Member
		want    bool
	}{
		{"every pod needed", []Member{{Task: "head", Min: 1}, {Task: "w", Min: 4, Count: 4}}, true},
		{"count left zero means min", []Member{{Task: "head", Min: 1}, {Task: "w", Min: 4}}, true},
		{"an elastic group: 3 workers meet minCount 3 without the head", []Member{{Task: "head", Min: 1, Count: 1}, {Task: "w", Min: 2, Count: 6}}, false},
		{"only task elastic", []Member{{Task: "w", Min: 2, Count: 6}}, true},
		{"an optional group can stand in for needed pods", []Member{{Task: "head", Min: 1}, {Task: "w", Min: 2}, {Task: "spare", Min: 0, Count: 3}}, false},
		{"an empty optional group cannot", []Member{{Task: "head", Min: 1}, {Task: "w", Min: 2}, {Task: "spare", Min: 0, Count: 0}}, true},
		{"two full groups", []Member{{Task: "head", Min: 1}, {Task: "a", Min: 3, Count: 3}, {Task: "b", Min: 5, Count: 5}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.members {
				tc.members[i].Pod = pod
			}
			if got := ForMembers(tc.members).TaskMinimumsImplied(); got != tc.want {
				t.Errorf("TaskMinimumsImplied() = %v, want %v", got, tc.want)
			}
		})
	}
}

func assertResources(t *testing.T, got, want corev1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || g.Cmp(w) != 0 {
			t.Errorf("%s = %s, want %s", name, g.String(), w.String())
		}
	}
}

func BenchmarkForMembers(b *testing.B) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{container("init", rl("cpu", "1"))},
		Containers:     []corev1.Container{container("w", rl("cpu", "4", "memory", "16Gi", "nvidia.com/gpu", "8"))},
	}}
	members := []Member{{Task: "head", Pod: pod, Min: 1}, {Task: "a", Pod: pod, Min: 16}, {Task: "b", Pod: pod, Min: 16}}
	b.ReportAllocs()
	for b.Loop() {
		_ = ForMembers(members)
	}
}
