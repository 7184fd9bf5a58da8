package measure

import (
	"testing"
	"time"
)

// The makespan runs from the first creation to the last Ready, status or
// pods, whichever gang they are of; a gang not Ready leaves none.
func TestMakespan(t *testing.T) {
	tls := map[string]Timeline{
		"a": {Created: at(time.Second), PodsReady: at(5 * time.Second), StatusReady: at(6 * time.Second)},
		"b": {Created: at(0), PodsReady: at(7 * time.Second), StatusReady: at(6500 * time.Millisecond)},
		"c": {Created: at(3 * time.Second), PodsReady: at(4 * time.Second), StatusReady: at(4 * time.Second)},
	}
	if got := Makespan(tls); got != 7*time.Second {
		t.Errorf("makespan %v, want 7s (b's creation to b's pods Ready)", got)
	}
	tls["d"] = Timeline{Created: at(time.Second), PodsReady: at(2 * time.Second)}
	if got := Makespan(tls); got != 0 {
		t.Errorf("makespan %v with a gang whose status never was Ready, want 0", got)
	}
	if got := Makespan(nil); got != 0 {
		t.Errorf("makespan %v of no gangs, want 0", got)
	}
}
