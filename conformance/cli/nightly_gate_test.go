package cli

import (
	"testing"

	"github.com/gpulab/gpulab/conformance/results"
)

// nightOf is one night's runs of the latency feature at the CronJob's
// footprint (two gangs), each run's p99 of the phases and its creation
// rate.
func nightOf(runs ...[3]float64) []results.Run {
	var rs []*results.Results
	for _, r := range runs {
		rs = append(rs, &results.Results{Measurements: []results.Measurement{
			results.Value("latency", "create_to_pods_created", "seconds", r[0]),
			results.Value("latency", "create_to_pods_ready", "seconds", r[1]),
			results.Value("latency", "gangs_per_second", "gangs/s", r[2]),
		}})
	}
	return results.Runs(rs...)
}

// The shipped CronJob's compare options, against nights measured on the
// local testbed at its footprint (--max-gpus=16: two gangs, so each p99 is
// the slower gang's, and the creation rate is two gangs over some 50 ms).
// Unchanged nights differ by tens to hundreds of milliseconds, all one
// way one night in twenty with three runs a side: the CronJob must call
// such a night unchanged (CI once failed an unchanged night on the
// creation rate's 1 gang/s floor, which at 25 to 38 gangs/s is no floor),
// and still fail the planted slowdown of TestShippedCronJobNights.
func TestShippedCronJobGateAtItsFootprint(t *testing.T) {
	shipped := renderShippedNightly(t)
	o, err := parseNightly(shipped.argv[2:])
	if err != nil {
		t.Fatal(err)
	}
	// Measured 2026-12-07: an unchanged night's runs.
	baseline := nightOf([3]float64{0.052, 0.348, 38.2}, [3]float64{0.081, 0.459, 24.6}, [3]float64{0.059, 0.400, 33.3})
	for name, c := range map[string]struct {
		current []results.Run
		regress bool
	}{
		// Unchanged runs, each slower than every baseline run (the draw
		// a 3-against-3 interval calls significant).
		"unchanged, every run slower": {nightOf([3]float64{0.092, 0.470, 21.7}, [3]float64{0.122, 0.540, 16.5}, [3]float64{0.095, 0.480, 20.9}), false},
		// The planted 500 ms before each pod create.
		"planted slowdown": {nightOf([3]float64{0.600, 1.580, 3.3}, [3]float64{0.590, 1.610, 3.4}, [3]float64{0.620, 1.500, 3.2}), true},
	} {
		t.Run(name, func(t *testing.T) {
			cmp, err := results.CompareRuns(baseline, c.current, o.Compare)
			if err != nil {
				t.Fatal(err)
			}
			if got := cmp.Regressions() > 0; got != c.regress {
				for _, r := range cmp.Rows {
					t.Logf("%s: %s %.3f -> %.3f [%+.0f%%, %+.0f%%] gated %t", r.Key, r.Verdict, r.Baseline, r.Current, 100*r.Low, 100*r.High, r.Gated)
				}
				t.Errorf("%d gated regressions, want regressed %t", cmp.Regressions(), c.regress)
			}
		})
	}
}
