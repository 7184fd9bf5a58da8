// Package poll waits for a condition with a deadline: what tests and the
// conformance suite use instead of sleeping.
package poll

import (
	"context"
	"fmt"
	"time"
)

// Interval is how often Until checks.
const Interval = 100 * time.Millisecond

// Until calls cond every Interval until it holds, timeout passes or ctx
// ends. On timeout the error carries cond's last detail, so a failure says
// what was still missing.
func Until(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(Interval)
	defer ticker.Stop()
	for {
		ok, detail := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: %s", timeout, detail)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), detail)
		case <-ticker.C:
		}
	}
}
