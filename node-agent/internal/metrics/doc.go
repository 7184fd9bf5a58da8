// Package metrics exports the agent's Prometheus metrics: per-GPU gauges under
// gpulab_gpu_ (labels gpu, UUID, pci_bus_id, device, modelName, hostname;
// values in base units: bytes, ratios, degrees Celsius, watts), the same GPUs
// under the DCGM exporter's field names (DCGM_FI_DEV_GPU_UTIL, _FB_USED, ...,
// in its units: %, MiB, C, W, MHz, with its labels gpu, UUID, pci_bus_id,
// device, modelName, Hostname, DCGM_FI_DRIVER_VERSION and the pod, namespace
// and container holding the GPU), and the agent's own scan, publish and event
// metrics under gpulab_agent_. Options.Format selects gpulab, dcgm or both
// (the default).
//
// GPU gauges are produced at scrape time from the last scan of each node, so
// a GPU or node that disappears takes its series with it.
package metrics
