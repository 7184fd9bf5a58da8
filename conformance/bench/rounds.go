package bench

import (
	"fmt"

	"github.com/gpulab/gpulab/conformance/results"
)

// DefaultRounds is how many counted runs each side gets by default.
const DefaultRounds = 3

// RoundOptions say how sides compared on the same gangs take turns.
type RoundOptions struct {
	// Rounds is how many counted runs each side gets, the order rotating
	// from round to round (default DefaultRounds; at least 2, as an
	// interval needs two runs a side).
	Rounds int
	// NoWarmUp skips the uncounted first round (each side once) that
	// warms the testbed's caches and the operators' informers.
	NoWarmUp bool
}

// Defaults fills in the default rounds and checks that there are at
// least two.
func (o *RoundOptions) Defaults() error {
	if o.Rounds == 0 {
		o.Rounds = DefaultRounds
	}
	if o.Rounds < 2 {
		return fmt.Errorf("rounds must be at least 2 (an interval needs two runs a side), got %d", o.Rounds)
	}
	return nil
}

// InRounds runs every side once a round, in Order, after an uncounted
// warm-up round unless NoWarmUp; run names each run "warm-up-<side>" or
// "round-<n>-<side>". It returns the counted runs by side, and stops at
// the first run that fails.
func (o RoundOptions) InRounds(sides []string, run func(name, side string) (*results.Results, error)) (map[string][]*results.Results, error) {
	runs := map[string][]*results.Results{}
	first := 0 // round 0 is the warm-up
	if o.NoWarmUp {
		first = 1
	}
	for round := first; round <= o.Rounds; round++ {
		for _, side := range Order(round, sides) {
			name := fmt.Sprintf("round-%d-%s", round, side)
			if round == 0 {
				name = "warm-up-" + side
			}
			r, err := run(name, side)
			if err != nil {
				return nil, err
			}
			if round > 0 {
				runs[side] = append(runs[side], r)
			}
		}
	}
	return runs, nil
}

// Order is round's order of the sides: rotated by one each round, so each
// side goes first, in the middle and last equally often over the rounds.
func Order(round int, sides []string) []string {
	k := round % len(sides)
	return append(append([]string(nil), sides[k:]...), sides[:k]...)
}
