// Package polltest is poll for tests: wait for a condition or fail the
// test, naming what was awaited. Only tests import it.
package polltest

import (
	"context"
	"testing"
	"time"

	"github.com/gpulab/gpulab/internal/poll"
)

// Eventually waits up to timeout for cond, checking every poll.Interval,
// and fails t naming what when it does not hold in time.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll.Until(context.Background(), timeout, func() (bool, string) { return cond(), what + " not yet" }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
