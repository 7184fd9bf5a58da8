package bench

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
)

func TestRoundOptionsDefaults(t *testing.T) {
	var o RoundOptions
	if err := o.Defaults(); err != nil || o.Rounds != DefaultRounds {
		t.Errorf("defaults = %+v, %v; want %d rounds", o, err, DefaultRounds)
	}
	for _, bad := range []int{1, -2} {
		o := RoundOptions{Rounds: bad}
		if err := o.Defaults(); err == nil {
			t.Errorf("%d rounds accepted: an interval needs two runs a side", bad)
		}
	}
}

// Every side runs once a round in the rotating order, the warm-up first
// and not counted, and the counted runs are filed by side in round order.
func TestInRounds(t *testing.T) {
	sides := []string{"a", "b", "c"}
	for _, tc := range []struct {
		opts  RoundOptions
		names []string
	}{
		{RoundOptions{Rounds: 2}, []string{"warm-up-a", "warm-up-b", "warm-up-c",
			"round-1-b", "round-1-c", "round-1-a", "round-2-c", "round-2-a", "round-2-b"}},
		{RoundOptions{Rounds: 2, NoWarmUp: true}, []string{"round-1-b", "round-1-c", "round-1-a", "round-2-c", "round-2-a", "round-2-b"}},
	} {
		var names []string
		runs, err := tc.opts.InRounds(sides, func(name, side string) (*results.Results, error) {
			names = append(names, name)
			return &results.Results{Warnings: []string{name}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names, tc.names) {
			t.Errorf("%+v ran %v, want %v", tc.opts, names, tc.names)
		}
		for _, s := range sides {
			var got []string
			for _, r := range runs[s] {
				got = append(got, r.Warnings[0])
			}
			if want := []string{"round-1-" + s, "round-2-" + s}; !slices.Equal(got, want) {
				t.Errorf("%+v: side %s counted %v, want %v", tc.opts, s, got, want)
			}
		}
	}
}

func TestInRoundsStopsAtAFailedRun(t *testing.T) {
	failed := errors.New("no results")
	ran := 0
	runs, err := RoundOptions{Rounds: 3}.InRounds([]string{"a", "b"}, func(name, side string) (*results.Results, error) {
		ran++
		if name == "round-1-b" {
			return nil, failed
		}
		return &results.Results{}, nil
	})
	if !errors.Is(err, failed) || runs != nil || ran != 3 {
		t.Errorf("after a failed run: runs %v, %v, %d runs; want its error and no more runs", runs, err, ran)
	}
}

func TestOrderRotatesAndKeepsTheSides(t *testing.T) {
	sides := []string{"a", "b", "c"}
	if got := Order(4, sides); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("Order(4) = %v", got)
	}
	if !slices.Equal(sides, []string{"a", "b", "c"}) {
		t.Errorf("Order changed its argument: %v", sides)
	}
}
