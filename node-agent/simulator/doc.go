// Package simulator runs the node agent for every fake GPU node of a testbed
// in one process: each node carrying the gpulab.io/testbed-profile label gets
// a mock NVML of that profile (UUIDs derived from the node name) and its own
// agent loop, publishing through the same code path as the agent on a real
// node. Nodes that appear, change profile or disappear are followed.
//
// Faults can be injected from outside the process by annotating a node with
// gpulab.io/simulate-xid: "<gpu>:<xid>[,<gpu>:<xid>...]"; each pair is
// delivered once through the node's mock NVML event set.
package simulator
