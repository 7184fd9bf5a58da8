// Package selftest runs the built gpulab-conformance binary, as a user
// runs it (--profile=cluster), against a real kube-apiserver (envtest)
// that serves gpulab's and Volcano's kinds and fake GPU nodes but runs no
// operator or scheduler. It tests what the suite's TestMain and features
// own and no unit test reaches: the run's own deadline and the results
// and cleanup after it, and the gates on disruptive actions.
//
// The binary is built from the working tree, or taken from
// $GPULAB_CONFORMANCE_SUITE (a released build, say). The tests need the
// testbed's binaries (`make testbed-binaries`) and are skipped with -short.
package selftest
