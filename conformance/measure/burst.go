package measure

import "time"

// Makespan is a burst's whole span: from the first gang's creation to the
// moment the last one was Ready, its status and its pods both. Zero when
// some gang never was.
func Makespan(timelines map[string]Timeline) time.Duration {
	var first, last time.Time
	for _, tl := range timelines {
		if tl.StatusReady.IsZero() || tl.PodsReady.IsZero() {
			return 0
		}
		if first.IsZero() || tl.Created.Before(first) {
			first = tl.Created
		}
		last = latest(latest(last, tl.StatusReady), tl.PodsReady)
	}
	return last.Sub(first)
}
