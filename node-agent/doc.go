// Package nodeagent is the root of gpulab's node agent: it reads each node's
// GPUs over NVML and publishes them as a GPUInventory, GFD-compatible node
// labels and per-GPU metrics.
package nodeagent

import (
	// Pinned here until the agent's packages import them.
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/prometheus/client_golang/prometheus"
)
