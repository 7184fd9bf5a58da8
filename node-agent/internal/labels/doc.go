// Package labels renders a node's GPUs as NVIDIA GPU Feature Discovery node
// labels: the same keys and value formats, so that workloads and tools written
// for GFD work unchanged on gpulab nodes.
package labels
