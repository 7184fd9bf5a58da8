package measure

import (
	"slices"
	"testing"
	"time"
)

func TestFreedToReady(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Room for 2 of 4: the first wave (Ready at 1 s and 1.2 s) waited for
	// nothing; gang 3 is let in by the first deletion (1.1 s), gang 4 by
	// the second (1.3 s), not both by the first.
	ready := []time.Time{at(1), at(1.2), at(3.1), at(2.3)}
	freed := []time.Time{at(1.1), at(1.3), at(3.2), at(2.4)}
	// Ready order is the order given; times need not be monotonic across
	// the pairing, only the pairing matters.
	got := FreedToReady(ready, freed, 2)
	want := []float64{2, 1}
	if len(got) != len(want) {
		t.Fatalf("FreedToReady = %v, want %v", got, want)
	}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Errorf("gang %d: %v s, want %v s", i+3, got[i], want[i])
		}
	}
	// A gang Ready before its room was freed waited for none.
	if got := FreedToReady([]time.Time{at(1), at(1.5)}, []time.Time{at(2)}, 1); !slices.Equal(got, []float64{0}) {
		t.Errorf("early gang: %v, want [0]", got)
	}
	if got := FreedToReady([]time.Time{at(1), at(2)}, nil, 2); len(got) != 0 {
		t.Errorf("no gang waited: %v", got)
	}
}

func TestReadyAt(t *testing.T) {
	a, b := time.Unix(10, 0), time.Unix(12, 0)
	if got := ReadyAt(Timeline{PodsReady: a, StatusReady: b}); !got.Equal(b) {
		t.Errorf("ReadyAt = %v, want the later %v", got, b)
	}
	if got := ReadyAt(Timeline{PodsReady: b, StatusReady: a}); !got.Equal(b) {
		t.Errorf("ReadyAt = %v, want the later %v", got, b)
	}
	if got := ReadyAt(Timeline{PodsReady: a}); !got.IsZero() {
		t.Errorf("ReadyAt without status Ready = %v, want zero", got)
	}
}
