package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestPodGoesThroughTheScheduler(t *testing.T) {
	p := Pod(Spec{Name: "smi-x", Node: "gpu-7", GPUs: 2, Image: "cuda", RuntimeClass: "nvidia"})
	if p.Spec.NodeName != "" {
		t.Errorf("spec.nodeName %q bypasses the scheduler", p.Spec.NodeName)
	}
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchFields[0].Key != "metadata.name" || terms[0].MatchFields[0].Values[0] != "gpu-7" {
		t.Errorf("affinity %+v, want the node by name", terms)
	}
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == "" {
			t.Errorf("toleration %+v tolerates every taint", tol)
		}
	}
	if q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("asks for %v GPUs, want 2", q.Value())
	}
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %v, want nvidia", p.Spec.RuntimeClassName)
	}
	if Pod(Spec{Name: "x", Node: "n", GPUs: 1}).Spec.RuntimeClassName != nil {
		t.Error("a runtime class without --runtime-class")
	}
	none := Pod(Spec{Name: "x", Node: "n", GPUs: 0, Image: "cuda"})
	if _, ok := none.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; ok {
		t.Error("the negative probe asks for a GPU")
	}
	if cmd := strings.Join(none.Spec.Containers[0].Command, " "); !strings.Contains(cmd, "nvidia-smi -L || true") {
		t.Errorf("negative probe command %q", cmd)
	}
}

// A holding probe queries in an init container and holds the very GPUs
// it queried (the same request) in its container, until Hold passes.
func TestHoldingProbeHoldsWhatItQueried(t *testing.T) {
	p := Pod(Spec{Name: "x", Node: "n", GPUs: 2, Hold: time.Minute, Image: "cuda"})
	if len(p.Spec.InitContainers) != 1 || len(p.Spec.Containers) != 1 {
		t.Fatalf("%d init containers, %d containers: want the query, then the hold", len(p.Spec.InitContainers), len(p.Spec.Containers))
	}
	query, hold := p.Spec.InitContainers[0], p.Spec.Containers[0]
	if query.Name != Container || !strings.Contains(strings.Join(query.Command, " "), "nvidia-smi --query-gpu") ||
		!strings.Contains(strings.Join(query.Command, " "), "&& echo "+Done) {
		t.Errorf("query %s %q", query.Name, query.Command)
	}
	if strings.Join(hold.Command, " ") != "sleep 60" {
		t.Errorf("hold command %q, want sleep 60", hold.Command)
	}
	if q := hold.Resources.Limits["nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("the hold asks for %v GPUs, want the query's 2", q.Value())
	}
	c := Pod(Spec{Name: "x", Node: "n", GPUs: 2, Hold: time.Minute, ClaimTemplate: "t"})
	if len(c.Spec.Containers[0].Resources.Claims) != 1 {
		t.Errorf("a holding claim probe's hold uses claims %v, want the pod's", c.Spec.Containers[0].Resources.Claims)
	}
}

// Every probe passes restricted Pod Security, which the run's namespaces
// enforce, and writes its output where Output reads it.
func TestProbesAreRestricted(t *testing.T) {
	for name, s := range map[string]Spec{
		"query": {GPUs: 1}, "none": {}, "hold": {GPUs: 1, Hold: time.Minute}, "claim": {GPUs: 1, ClaimTemplate: "t"},
	} {
		p := Pod(s)
		ps := p.Spec.SecurityContext
		if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 ||
			ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext %+v: want non-root, a non-zero UID and RuntimeDefault seccomp", name, ps)
		}
		if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC || len(p.Spec.Volumes) > 0 {
			t.Errorf("%s: host namespaces or volumes", name)
		}
		for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
				len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0 || sc.Privileged != nil {
				t.Errorf("%s: container %s securityContext %+v", name, c.Name, sc)
			}
			if c.Name == Container && !strings.Contains(strings.Join(c.Command, " "), ">/dev/termination-log") {
				t.Errorf("%s: %q does not write the termination message", name, c.Command)
			}
		}
	}
}

func TestOutputIsTheTerminationMessage(t *testing.T) {
	p := &corev1.Pod{}
	if got := Output(p); got != "" {
		t.Errorf("a pod that has not run: %q", got)
	}
	ended := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "0, GPU-1\n" + Done}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "hold", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: Container, State: ended}}
	if got := Output(p); got != ended.Terminated.Message {
		t.Errorf("a holding probe: %q", got)
	}
	p.Status.InitContainerStatuses = nil
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: Container, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if got := Output(p); got != "" {
		t.Errorf("a running probe: %q", got)
	}
	p.Status.ContainerStatuses[0].State = ended
	if got := Output(p); got != ended.Terminated.Message {
		t.Errorf("an ended probe: %q", got)
	}
}

func TestClaimProbeTakesItsGPUsFromTheClaim(t *testing.T) {
	p := Pod(Spec{Name: "smi-dra", Node: "gpu-7", GPUs: 4, ClaimTemplate: "smi-dra", Image: "cuda"})
	ctr := p.Spec.Containers[0]
	if _, ok := ctr.Resources.Limits["nvidia.com/gpu"]; ok {
		t.Error("a claim probe also asks for nvidia.com/gpu: it would hold GPUs twice where both are served")
	}
	if len(ctr.Resources.Claims) != 1 || len(p.Spec.ResourceClaims) != 1 || ctr.Resources.Claims[0].Name != p.Spec.ResourceClaims[0].Name ||
		p.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil || *p.Spec.ResourceClaims[0].ResourceClaimTemplateName != "smi-dra" {
		t.Errorf("claims: container %+v, pod %+v; want the container to use the pod's claim from template smi-dra", ctr.Resources.Claims, p.Spec.ResourceClaims)
	}
	if cmd := strings.Join(ctr.Command, " "); strings.Contains(cmd, "-L") {
		t.Errorf("a claim probe runs the negative probe's command %q", cmd)
	}
	if Pod(Spec{Name: "x", Node: "n", GPUs: 1}).Spec.ResourceClaims != nil {
		t.Error("a probe without a claim template has a claim")
	}
}

func TestName(t *testing.T) {
	if got := Name("all", "gpu-1"); got != "smi-all-gpu-1" {
		t.Errorf("Name = %q", got)
	}
	long := strings.Repeat("n", 70) + ".example.com"
	a, b := Name("all", long), Name("all", long+"x")
	if len(a) > 63 || strings.Contains(a, ".") || a == b {
		t.Errorf("long names %q, %q: want distinct DNS labels", a, b)
	}
}

func TestUnplaceable(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 1 Insufficient nvidia.com/gpu"}}}}
	if got := Unplaceable(p); !strings.Contains(got, "Insufficient") {
		t.Errorf("Unplaceable = %q", got)
	}
	p.Spec.NodeName = "n"
	if got := Unplaceable(p); got != "" {
		t.Errorf("a bound pod: %q", got)
	}
}

func TestNoGPUSeen(t *testing.T) {
	for _, tc := range []struct {
		log, visible string
		gpus         int
		err          bool
	}{
		{"NVIDIA_VISIBLE_DEVICES=all\nNo devices were found\n" + Done + "\n", "all", 0, false},
		{"NVIDIA_VISIBLE_DEVICES=unset\nsh: nvidia-smi: not found\n" + Done + "\n", "unset", 0, false},
		{"NVIDIA_VISIBLE_DEVICES=all\nGPU 0: NVIDIA H200 (UUID: GPU-a1)\nGPU 1: NVIDIA H200 (UUID: GPU-b2)\n" + Done + "\n", "all", 2, false},
		{"NVIDIA_VISIBLE_DEVICES=all\n", "all", 0, true},
	} {
		visible, gpus, err := NoGPUSeen(tc.log)
		if visible != tc.visible || len(gpus) != tc.gpus || (err != nil) != tc.err {
			t.Errorf("NoGPUSeen(%q) = %q, %v, %v", tc.log, visible, gpus, err)
		}
	}
}

// h200-host.log is the probe's command run on a real H200 host.
func TestNoGPUSeenRealH200(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "h200-host.log"))
	if err != nil {
		t.Fatal(err)
	}
	visible, gpus, err := NoGPUSeen(string(raw))
	if err != nil || visible != "0" || len(gpus) != 1 || !strings.Contains(gpus[0], "UUID: GPU-ab739f5a-c8c9-91ff-7656-e7ff8cf6811e") {
		t.Errorf("NoGPUSeen = %q, %q, %v; want 0, the H200's UUID, no error", visible, gpus, err)
	}
}
