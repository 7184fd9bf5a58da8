//go:build gpulab_faults

package gpucluster

import "os"

// plantedFault breaks one invariant on purpose, in builds with -tags
// gpulab_faults only: GPULAB_PLANTED_FAULT=pods-before-podgroup or
// duplicate-pod.
var plantedFault = os.Getenv("GPULAB_PLANTED_FAULT")
