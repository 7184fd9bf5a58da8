// Package metrics exports the agent's Prometheus metrics: per-GPU gauges under
// gpulab_gpu_ with the labels the DCGM exporter uses (gpu, UUID, pci_bus_id,
// device, modelName, hostname), and the agent's own scan, publish and event
// metrics under gpulab_agent_. Values are in base units: bytes, ratios,
// degrees Celsius, watts.
//
// GPU gauges are produced at scrape time from the last scan of each node, so
// a GPU or node that disappears takes its series with it.
package metrics
