// Package deviceplugin is a kubelet device plugin
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) for the agent's GPUs: it
// serves nvidia.com/gpu on a unix socket in the kubelet's device-plugin
// directory and registers it with the kubelet's Registration service there.
//
// The agent's scans feed it (SetDevices): one Device per GPU, its ID the GPU
// UUID, Healthy or Unhealthy by the agent's health verdict, and its NUMA node
// as topology. ListAndWatch streams every change. Allocate answers the IDs the
// kubelet chose in the forms of the NVIDIA device plugin's device list
// strategies (Strategy): NVIDIA_VISIBLE_DEVICES by default, /dev/null mounts,
// or CDI device names in an annotation or the CRI field. It refuses IDs it
// does not serve. GetPreferredAllocation keeps an allocation on one NUMA node
// when it fits.
//
// A restarting kubelet removes every plugin socket and recreates its own;
// Run notices either, serves again and re-registers. The kubelet, not the
// plugin, makes sure no device is handed to two containers.
package deviceplugin
