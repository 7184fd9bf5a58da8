// Package probe builds the suite's nvidia-smi probe pods (--real-gpus) and
// reads what they print. A probe goes through the scheduler like any
// workload: it is kept to one node by node affinity, tolerates only the GPU
// taint GPU nodes commonly carry, and asks for its GPUs, so it never lands
// where the scheduler would not put a tenant's pod and never takes GPUs
// another pod holds. A probe that cannot be placed (a tenant holds the
// node's GPUs now) is the suite's cue to skip that node, not a failure.
package probe

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/internal/gfd"
)

// Done is the line a holding probe prints after nvidia-smi's output.
const Done = "gpulab-probe-done"

// Spec is one probe pod.
type Spec struct {
	// Name is the pod's (Name builds one).
	Name string
	// Node is the node the probe must run on.
	Node string
	// GPUs is how many GPUs it asks for; 0 asks for none (the negative
	// check: it must see none).
	GPUs int64
	// ClaimTemplate, when set, is the ResourceClaimTemplate the pod's
	// GPUs come from (Dynamic Resource Allocation) instead of GPUs
	// nvidia.com/gpu; GPUs then only says the probe queries them.
	ClaimTemplate string
	// Hold keeps the pod, and its GPUs, after the query until deleted
	// (or Hold passes); its output ends in Done once the query has.
	Hold time.Duration
	// Image needs nvidia-smi, sh and sleep.
	Image string
	// RuntimeClass is the pod's runtimeClassName (--runtime-class), where
	// the NVIDIA runtime is not the node's default.
	RuntimeClass string
}

// Container is the probe's container, whose termination message is its
// output (Output).
const Container = "probe"

// probeUID is the probe's user: restricted Pod Security wants a non-root
// one, and the image's own may be root (CUDA images' is). nvidia-smi needs
// no root: the device nodes the NVIDIA runtime mounts are world-usable.
const probeUID = 65534

// Pod is the probe pod of s. Its output goes to the probe container's
// termination message as well as its log, so the suite reads it from the
// pod's status (Output) and needs no right to read logs. A holding probe
// queries in an init container and holds the same GPUs in its one
// container (the kubelet hands an init container's devices on to the
// pod's containers): its output is readable while it holds.
func Pod(s Spec) *corev1.Pod {
	command := strings.Join(measure.NvidiaSMIQuery, " ")
	switch {
	case s.GPUs == 0:
		// What the container environment says, then what nvidia-smi
		// sees; a failing nvidia-smi (no device, no library) is a
		// result, not an error of the probe.
		command = "echo NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-unset}; nvidia-smi -L || true; echo " + Done
	case s.Hold > 0:
		command += " && echo " + Done
	}
	ctr := restricted(corev1.Container{Name: Container, Image: s.Image, Command: []string{"sh", "-c", toTerminationMessage(command)}})
	switch {
	case s.ClaimTemplate != "":
		ctr.Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	case s.GPUs > 0:
		ctr.Resources.Limits = corev1.ResourceList{gfd.GPUResource: *resource.NewQuantity(s.GPUs, resource.DecimalSI)}
	}
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// Restricted Pod Security: the run's namespaces enforce it.
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: new(int64(probeUID)), RunAsGroup: new(int64(probeUID)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Tolerations: []corev1.Toleration{{Key: string(gfd.GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{s.Node}}},
				}}},
			}},
			Containers: []corev1.Container{ctr},
		},
	}
	if s.Hold > 0 {
		hold := restricted(corev1.Container{Name: "hold", Image: s.Image, Command: []string{"sleep", fmt.Sprint(int(s.Hold.Seconds()))}})
		hold.Resources = *ctr.Resources.DeepCopy()
		pod.Spec.InitContainers, pod.Spec.Containers = []corev1.Container{ctr}, []corev1.Container{hold}
	}
	if s.ClaimTemplate != "" {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &s.ClaimTemplate}}
	}
	if s.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = &s.RuntimeClass
	}
	return pod
}

// restricted is c as restricted Pod Security wants it.
func restricted(c corev1.Container) corev1.Container {
	no := false
	c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	return c
}

// toTerminationMessage runs command with its output (stdout and stderr, as
// a log has them) in the termination message, then in the log too, and
// exits as command did. The kubelet keeps 4096 bytes of a message: the
// query's CSV is about 100 bytes a GPU.
func toTerminationMessage(command string) string {
	return "( " + command + " ) >/dev/termination-log 2>&1; rc=$?; cat /dev/termination-log; exit $rc"
}

// Output is what the probe printed, from its container's termination
// message: "" until that container has ended.
func Output(p *corev1.Pod) string {
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.Name == Container && s.State.Terminated != nil {
			return s.State.Terminated.Message
		}
	}
	return ""
}

// Name is a DNS label naming kind's probe on node: node names can be long
// and hold dots, so such a name is cut and ends in a hash of the node
// name, which keeps it unique.
func Name(kind, node string) string {
	name := "smi-" + kind + "-" + node
	if len(name) <= 63 && !strings.Contains(name, ".") {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	name = strings.ReplaceAll(name, ".", "-")
	if len(name) > 63-len(suffix) {
		name = name[:63-len(suffix)]
	}
	return strings.TrimRight(name, "-") + suffix
}

// Unplaceable says why the scheduler cannot place a pending probe (its
// PodScheduled=False Unschedulable message), or "" while it may still.
func Unplaceable(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

// NoGPUSeen is what a probe that asked for no GPU printed: its
// NVIDIA_VISIBLE_DEVICES ("unset" when it had none) and the GPUs
// `nvidia-smi -L` listed. It fails when the output is cut short.
func NoGPUSeen(log string) (visible string, gpus []string, err error) {
	sc := bufio.NewScanner(strings.NewReader(log))
	done := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "NVIDIA_VISIBLE_DEVICES="):
			visible = strings.TrimPrefix(line, "NVIDIA_VISIBLE_DEVICES=")
		case strings.HasPrefix(line, "GPU ") && strings.Contains(line, "UUID:"):
			gpus = append(gpus, line)
		case line == Done:
			done = true
		}
	}
	if !done || visible == "" {
		return visible, gpus, fmt.Errorf("the probe's output is incomplete: %q", log)
	}
	return visible, gpus, nil
}
