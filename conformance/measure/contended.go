package measure

import "time"

// FreedToReady is how long each gang that waited for room took to be Ready
// after the deletion that made room for it. The gangs are all of one size
// and contend for room for `room` of them, and each Ready gang is deleted
// at once (freed, in order), freeing one gang's room. So the first `room`
// to be Ready never waited and are not measured, and after them the i-th
// to be Ready was let in by deletion i-room. ready holds the Ready times in
// the order the gangs became Ready. A gang Ready before its deletion (the
// pool had more room than reckoned) waited for none: 0.
func FreedToReady(ready, freed []time.Time, room int) []float64 {
	var out []float64
	for i := room; i < len(ready); i++ {
		j := i - room
		if j >= len(freed) {
			break
		}
		out = append(out, max(ready[i].Sub(freed[j]).Seconds(), 0))
	}
	return out
}

// ReadyAt is when a gang's timeline shows it Ready: its pods Ready and its
// status Ready, whichever came last; zero until both did.
func ReadyAt(tl Timeline) time.Time {
	if tl.PodsReady.IsZero() || tl.StatusReady.IsZero() {
		return time.Time{}
	}
	if tl.PodsReady.After(tl.StatusReady) {
		return tl.PodsReady
	}
	return tl.StatusReady
}
