// Package agent runs the node agent's loop for one node: scan NVML on an
// interval and whenever a health event may have changed a GPU, turn the scan
// into a GPUInventory status, labels and metrics, and hand them to a
// publisher that writes only what changed.
package agent
