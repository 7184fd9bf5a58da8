package v1alpha1

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Names of the objects the operator creates for a GPUCluster or GPUJob, in
// one place: the operator creates them, and the suite, tests and users find
// them by these rules. Group names contain no '-' (see WorkerGroupSpec.Name),
// so no two clusters ever want one pod name.

// HeadPodName is the cluster's head pod: <cluster>-head.
func HeadPodName(cluster string) string { return cluster + "-head" }

// WorkerPodName is a worker pod: <cluster>-<group>-<index>. The name is
// deterministic, so a second create of one pod fails with AlreadyExists: no
// cache lag, restart or second replica can make a duplicate.
func WorkerPodName(cluster, group string, index int32) string {
	return fmt.Sprintf("%s-%s-%d", cluster, group, index)
}

// GPUClaimTemplateName is the ResourceClaimTemplate of a group whose GPUs
// come through DRA (gpus.deviceClassName): <cluster>-<group>-gpus.
func GPUClaimTemplateName(cluster, group string) string { return cluster + "-" + group + "-gpus" }

// GPUClaimName is the pod's claim (spec.resourceClaims[].name) and the
// container's (resources.claims[].name) for its DRA GPUs.
const GPUClaimName = "gpus"

// HeadServiceName is the cluster's headless head Service: <cluster>-head.
func HeadServiceName(cluster string) string { return cluster + "-head" }

// HeadAddress is the head's DNS name, as every pod and submitter gets it.
func HeadAddress(cluster, namespace string) string {
	return fmt.Sprintf("%s.%s.svc", HeadServiceName(cluster), namespace)
}

// PodGroupName is the cluster's Volcano PodGroup: <cluster>-pg.
func PodGroupName(cluster string) string { return cluster + "-pg" }

// JobClusterName is the GPUCluster of a GPUJob's attempt: <job>-<attempt>.
func JobClusterName(job string, attempt int32) string { return fmt.Sprintf("%s-%d", job, attempt) }

// SubmitterName is the batch/v1 Job of a GPUJob's attempt: <job>-submit-<attempt>.
func SubmitterName(job string, attempt int32) string {
	return fmt.Sprintf("%s-submit-%d", job, attempt)
}

// Environment variables the operator sets in every container of a cluster's
// pods and of a job's submitter, so launchers (torchrun, mpirun) find the
// head and their rank without a discovery service.
const (
	// EnvClusterName is the GPUCluster's name (pods and submitter).
	EnvClusterName = "GPULAB_CLUSTER_NAME"
	// EnvHeadAddress is HeadAddress of the cluster (pods and submitter).
	EnvHeadAddress = "GPULAB_HEAD_ADDRESS"
	// EnvGroup is the pod's group: "head" or a worker group (pods).
	EnvGroup = "GPULAB_GROUP"
	// EnvIndex is the pod's index within its group (pods).
	EnvIndex = "GPULAB_INDEX"
	// EnvClusterPods is the cluster's pod names, comma-separated (submitter).
	EnvClusterPods = "GPULAB_CLUSTER_PODS"
	// EnvAttempt is the job's attempt, from 1 (submitter).
	EnvAttempt = "GPULAB_ATTEMPT"
)

// HeadServicePorts lists the head containers' ports once per port and
// protocol, each under a unique name: a Service with two ports of one
// name is invalid, and the head Service is created before any pod. The operator and the
// suite's bare gangs (conformance/bare) name them alike. An
// unnamed port is port-N, with the protocol for other than TCP (29500 on
// TCP and UDP, as torchrun and NCCL bootstraps open it); a name already
// taken falls back to that, then to its position.
func HeadServicePorts(containers []corev1.Container) []corev1.ServicePort {
	type portKey struct {
		port     int32
		protocol corev1.Protocol
	}
	var ports []corev1.ServicePort
	listed := map[portKey]bool{}
	names := map[string]bool{}
	for _, c := range containers {
		for _, p := range c.Ports {
			protocol := p.Protocol
			if protocol == "" {
				protocol = corev1.ProtocolTCP
			}
			key := portKey{p.ContainerPort, protocol}
			if listed[key] {
				continue
			}
			listed[key] = true
			fallback := fmt.Sprintf("port-%d", p.ContainerPort)
			if protocol != corev1.ProtocolTCP {
				fallback += "-" + strings.ToLower(string(protocol))
			}
			name := p.Name
			for _, candidate := range []string{fallback, fmt.Sprintf("p%d", len(ports))} {
				if name != "" && !names[name] {
					break
				}
				name = candidate
			}
			names[name] = true
			ports = append(ports, corev1.ServicePort{Name: name, Port: p.ContainerPort, Protocol: p.Protocol})
		}
	}
	return ports
}

// PodTemplateHash is the PodTemplateHashAnnotation value: a digest of a pod as built, before the hash is added: it
// changes with anything the spec puts in the pod, and only then. The
// operator and the suite's bare gangs (conformance/bare) stamp pods alike.
func PodTemplateHash(pod *corev1.Pod) string {
	data, err := json.Marshal(struct {
		Labels, Annotations map[string]string
		Spec                corev1.PodSpec
	}{pod.Labels, pod.Annotations, pod.Spec})
	if err != nil {
		// A PodSpec always marshals; a panic here is a programming error.
		panic(fmt.Sprintf("hashing pod %s: %v", pod.Name, err))
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return strconv.FormatUint(h.Sum64(), 36)
}
