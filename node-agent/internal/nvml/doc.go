// Package nvml reads a node's GPUs through NVML (github.com/NVIDIA/go-nvml).
//
// A Backend is one NVML library: the real libnvidia-ml.so.1 (NewReal) or any
// other implementation of go-nvml's Interface, such as the scriptable mock
// servers in package mock. Every NVML call is gated on a successful Init, and
// functions an older driver lacks are looked up before use, because either
// mistake terminates the process inside the C library rather than returning
// an error.
//
// Snapshot reads identity, MIG, fabric, row-remapping and telemetry for every
// GPU; a query that fails on one GPU is recorded in that GPU's Errors and never
// fails the scan. Watch streams XID, ECC and GPU-lost events from an NVML
// event set.
package nvml
