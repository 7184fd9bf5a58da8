// Package health decides whether each GPU can take work.
//
// Some signals are events that NVML reports once (XID critical errors,
// double-bit ECC errors): a Tracker remembers them for the life of the agent,
// as the NVIDIA device plugin does, because the GPU needs a reset and the
// agent a restart before it can be trusted again. Others are state that every
// scan reads afresh (a lost GPU, a row-remapping failure, an incomplete NVLink
// fabric). Evaluate combines both into the GPUInventory health of one GPU.
package health
