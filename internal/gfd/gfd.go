// Package gfd holds the NVIDIA GPU Feature Discovery label keys and the
// device plugin's resource name, the one home for names that the agent
// writes, the operator places pods with, the testbeds fake and the suite
// reads (as k8s-device-plugin v0.20 spells them).
package gfd

import corev1 "k8s.io/api/core/v1"

// GPUResource is the device plugin's extended resource.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// Prefix is the domain of every GFD label.
const Prefix = "nvidia.com/"

// GFD label keys.
const (
	Product             = "nvidia.com/gpu.product"
	Count               = "nvidia.com/gpu.count"
	Memory              = "nvidia.com/gpu.memory"
	Family              = "nvidia.com/gpu.family"
	ComputeMajor        = "nvidia.com/gpu.compute.major"
	ComputeMinor        = "nvidia.com/gpu.compute.minor"
	Machine             = "nvidia.com/gpu.machine"
	DriverVersionMajor  = "nvidia.com/cuda.driver-version.major"
	DriverVersionMinor  = "nvidia.com/cuda.driver-version.minor"
	DriverVersionRev    = "nvidia.com/cuda.driver-version.revision"
	DriverVersionFull   = "nvidia.com/cuda.driver-version.full"
	RuntimeVersionMajor = "nvidia.com/cuda.runtime-version.major"
	RuntimeVersionMinor = "nvidia.com/cuda.runtime-version.minor"
	RuntimeVersionFull  = "nvidia.com/cuda.runtime-version.full"
	MIGCapable          = "nvidia.com/mig.capable"
)
