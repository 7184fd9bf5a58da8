// Package conformance is gpulab's conformance suite: on any kubeconfig (or
// the local testbed it creates) it measures reconcile latency and gang
// placement and asserts what must hold — all-or-nothing binding, no
// duplicate pods, recovery after the operator is killed — writing
// results.json, junit.xml and report.md for nightly regression jobs.
//
// Run it with `make conformance`, `go test ./conformance/ -args --profile=local`,
// or as the prebuilt test binary bin/gpulab-conformance, which also offers
// `gpulab-conformance compare --baseline A --current B`.
package conformance
