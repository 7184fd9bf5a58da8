// Package podresources attributes GPUs to the pods that hold them, from the
// kubelet's pod-resources API (k8s.io/kubelet/pkg/apis/podresources/v1, a
// gRPC service on a unix socket, /var/lib/kubelet/pod-resources/kubelet.sock).
// Its List answers, per container, the device IDs each device plugin
// allocated; the NVIDIA device plugin and the agent's own advertise GPUs by
// UUID, so the answer maps a GPU UUID to its pod, namespace and container, as
// the DCGM exporter labels its series.
//
// A missing socket is not an error: a node without the socket (or an agent
// that cannot see it) exports its series with empty pod labels, and says so
// in one log line rather than on every scrape.
package podresources
