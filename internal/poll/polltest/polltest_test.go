package polltest

import (
	"testing"
	"time"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	calls := 0
	Eventually(t, time.Second, "the third call", func() bool { calls++; return calls >= 3 })
	if calls != 3 {
		t.Errorf("cond called %d times, want 3 (until it held)", calls)
	}
}
