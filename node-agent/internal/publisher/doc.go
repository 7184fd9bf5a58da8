// Package publisher writes what the agent observed to the API server with
// server-side apply under the agent's own field manager: the node's
// GPUInventory, its GFD-compatible labels and, on testbeds only, its
// nvidia.com/gpu capacity.
//
// A Publisher remembers what it last wrote for each node and writes an object
// only when its desired content changed, so an idle node costs the API server
// nothing between scans. Because it applies only the fields it owns, labels
// the agent stops producing are removed and labels others own are untouched.
package publisher
