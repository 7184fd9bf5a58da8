//go:build !gpulab_faults

package gpucluster

// plantedFault is always empty in real builds. Test builds (-tags
// gpulab_faults, fault_on.go) read it from the environment so the
// conformance suite can prove it catches a broken operator.
const plantedFault = ""
