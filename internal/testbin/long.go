package testbin

import (
	"os"
	"testing"
)

// LongEnv names the environment variable that runs the long tests: those
// that bring up a testbed with Karpenter or KubeRay beside Volcano and run
// the suite's features for minutes. `make test` leaves them to `make
// test-long`, which CI runs right after it, so that the inner loop stays
// short; nothing is dropped.
const LongEnv = "GPULAB_LONG_TESTS"

// SkipUnlessLong skips t, saying where it runs, unless LongEnv is set.
func SkipUnlessLong(t testing.TB) {
	t.Helper()
	if os.Getenv(LongEnv) == "" {
		t.Skipf("a long test: make test-long runs it (%s=1)", LongEnv)
	}
}
