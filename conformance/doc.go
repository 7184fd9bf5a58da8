// Package conformance is gpulab's conformance suite: on any kubeconfig (or
// the local testbed it creates) it measures reconcile latency and gang
// placement and asserts what must hold — all-or-nothing binding, no
// duplicate pods, recovery after the operator is killed — writing
// results.json, junit.xml and report.md for nightly regression jobs.
//
// Every assessment is reported passed, failed or skipped with its reason
// and the AI-conformance requirement it evidences (plan_test.go records
// it; each feature file names the requirement next to the assessment). A
// feature passes only if all its assessments passed, a skip makes it
// partial; the run is PASSED, PARTIAL or FAILED and exits 0, 3 or 1 (2 for
// bad usage). A setup failure is a FAILED run with a failed "setup" entry.
//
// Run it with `make conformance`, `go test ./conformance/ -args --profile=local`,
// or as the prebuilt test binary bin/gpulab-conformance, which also offers
// `gpulab-conformance compare --baseline A --current B`.
package conformance
