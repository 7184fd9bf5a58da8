// Package inventory turns an NVML snapshot and the GPUs' health into the
// status of a GPUInventory. It is pure: times come from the caller, and times
// already published are carried forward, so that a status only changes when
// the node does and the agent writes only then.
package inventory
