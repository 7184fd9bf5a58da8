// Package mock is a scriptable NVML for tests and testbeds, built on go-nvml's
// mock servers (pkg/nvml/mock/dgxa100, dgxh100, dgxh200, dgxb200).
//
// go-nvml's servers leave many methods nil (they panic when called) and report
// values that differ from real machines. A Profile corrects them to what a
// real node of that kind reports (product name, memory, PCI ids and bus ids,
// fabric state, driver versions), fills every method the agent calls, and
// derives UUIDs from the node name and GPU index so that inventories are
// reproducible.
//
// A Backend adds fault injection: XID and ECC events through the NVML event
// set, lost GPUs, row-remapping failures, fabric states, failing queries,
// telemetry and MIG devices.
package mock
