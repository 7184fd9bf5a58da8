//go:build gpulab_faults

package conformance

import "os"

// PlantedSuiteFault, in the environment of a suite built with -tags
// gpulab_faults, plants a fault in a workload the suite creates:
// vcjob-min-available gives Volcano Jobs minAvailable 1, so Volcano may
// bind them partly, which the partial-binding detector must catch.
const PlantedSuiteFault = "GPULAB_PLANTED_SUITE_FAULT"

func plantedMinAvailable(pods int32) int32 {
	if os.Getenv(PlantedSuiteFault) == "vcjob-min-available" {
		return 1
	}
	return pods
}
