//go:build !gpulab_faults

package conformance

// plantedMinAvailable is a Volcano Job's minAvailable: every pod of the
// gang. Builds with -tags gpulab_faults can plant a smaller one
// (planted_faults_test.go) to prove the detectors catch it.
func plantedMinAvailable(pods int32) int32 { return pods }
