// Package bench is the one harness of gpulab's benchmarks (bench-scale,
// compare-operators, compare-schedulers, compare-autoscaling): a local
// testbed sized for N gangs, gpulab's operator run against it (Options.Up,
// a Bed), the conformance suite run on it (Bed.RunSuite) with the CPU of
// the testbed's processes recorded around the run, the suite's results
// read back, and rounds of sides in rotating order (InRounds). Each
// benchmark declares only what varies: the testbed's extras, the
// operator's, the suite's workload, features and flags, and what it
// renders.
package bench
