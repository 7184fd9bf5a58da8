// Package cli is the gpulab-agent command line: flag parsing and validation,
// wiring of the agent (or the testbed fleet simulator) to the API server, the
// metrics endpoint, the kubelet's pod-resources API and, with
// --device-plugin, the kubelet's device-plugin API; and the one-shot
// inventory command.
//
// Device-plugin mode, for a DaemonSet that replaces the NVIDIA device plugin
// (the kind testbed serves its mock GPUs this way):
//
//	gpulab-agent --device-plugin [--device-plugin-dir=/var/lib/kubelet/device-plugins/]
//	             [--device-plugin-resource=nvidia.com/gpu] [--nvml=real|mock:<profile>]
//
// The container mounts the host's /var/lib/kubelet/device-plugins (hostPath,
// read-write) at --device-plugin-dir and, for pod attribution, the host's
// /var/lib/kubelet/pod-resources at the directory of --pod-resources-socket;
// both are root's, so the container runs as root, and hostPath volumes need
// the privileged Pod Security level (see config/device-plugin). The agent
// serves gpulab-gpu.sock there, registers nvidia.com/gpu with kubelet.sock,
// and registers again whenever the kubelet restarts. It does not set the
// node's capacity itself (--advertise-capacity is refused): the kubelet does,
// from the devices the plugin streams.
package cli
