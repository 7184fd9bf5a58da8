package gpujob

import (
	"testing"
	"time"
)

// TestStaleBackoff: a cache that stays behind gets retries further and
// further apart, up to a cap, instead of one every 50 ms.
func TestStaleBackoff(t *testing.T) {
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for tries, w := range want {
		if got := staleBackoff(tries); got != w {
			t.Errorf("staleBackoff(%d) = %s, want %s", tries, got, w)
		}
	}
	if got := staleBackoff(1000); got != 5*time.Second {
		t.Errorf("staleBackoff(1000) = %s, want the 5 s cap", got)
	}
}
