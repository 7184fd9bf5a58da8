package measure

import (
	"context"
	"fmt"
	"time"
)

// What callers ask of a running recorder.

// WaitFor returns once cond holds for the named cluster's timeline. It
// checks on every event the watches deliver, not on a timer, so a caller
// reacting to a moment (killing the operator mid-creation) reacts within
// the watch latency.
func (r *Recorder) WaitFor(ctx context.Context, timeout time.Duration, name string, cond func(Timeline) bool) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		ok := false
		if t, found := r.clusters[name]; found {
			ok = cond(*t)
		}
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("cluster %s: condition not met within %s", name, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Timelines copies every cluster's timeline.
func (r *Recorder) Timelines() map[string]Timeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Timeline, len(r.clusters))
	for k, v := range r.clusters {
		out[k] = *v
	}
	return out
}

// LongestPartial is the longest any gang was seen partly bound, a
// partial binding still going included (within the grace it is the
// binder's one-call-per-pod, beyond it a violation).
func (r *Recorder) LongestPartial(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var longest time.Duration
	for _, t := range r.clusters {
		longest = max(longest, t.maxSplit)
		if !t.partial.IsZero() {
			longest = max(longest, now.Sub(t.partial))
		}
	}
	return longest
}

// Bound says how many of a cluster's live pods are bound.
func (r *Recorder) Bound(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	if t, ok := r.clusters[name]; ok {
		for _, s := range t.pods {
			if s.bound {
				n++
			}
		}
	}
	return n
}
