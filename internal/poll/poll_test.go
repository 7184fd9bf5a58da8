package poll

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(context.Background(), time.Second, func() (bool, string) { n++; return n == 3, "" }); err != nil || n != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, n)
	}
	err := Until(context.Background(), 250*time.Millisecond, func() (bool, string) { return false, "still 2 pods" })
	if err == nil || !strings.Contains(err.Error(), "still 2 pods") {
		t.Fatalf("timeout error %v lacks the last detail", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, time.Minute, func() (bool, string) { return false, "x" }); err == nil {
		t.Fatal("a cancelled context did not stop Until")
	}
}
