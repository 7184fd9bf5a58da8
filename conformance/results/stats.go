package results

import (
	"math"
	"math/rand/v2"
	"slices"
)

// The bootstrap's defaults: 10,000 resamples give interval bounds that move
// by well under a percentage point between seeds; the seed is fixed so one
// pair of result sets always gives one answer.
const (
	DefaultResamples  = 10000
	DefaultConfidence = 0.95
	DefaultSeed       = 1
)

// MedianOf is the middle of vals (of an even count, the mean of the two
// middle values), NaN of none; vals is sorted in place.
func MedianOf(vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	slices.Sort(vals)
	mid := len(vals) / 2
	if len(vals)%2 == 0 {
		return (vals[mid-1] + vals[mid]) / 2
	}
	return vals[mid]
}

// relativeChange is (current-baseline)/|baseline|: +0.25 is 25% larger.
// From a zero baseline any growth is +Inf and any fall -Inf.
func relativeChange(baseline, current float64) float64 {
	switch {
	case baseline != 0:
		return (current - baseline) / math.Abs(baseline)
	case current > 0:
		return math.Inf(1)
	case current < 0:
		return math.Inf(-1)
	default:
		return 0
	}
}

// BootstrapOptions sets a bootstrap interval.
type BootstrapOptions struct {
	// Confidence is the interval's level; 0 means DefaultConfidence (0.95).
	Confidence float64
	// Resamples is how many times each side is resampled; 0 means
	// DefaultResamples (10,000).
	Resamples int
	// Seed makes the resampling repeatable; 0 means DefaultSeed.
	Seed uint64
}

func (o BootstrapOptions) withDefaults() BootstrapOptions {
	if o.Confidence == 0 {
		o.Confidence = DefaultConfidence
	}
	if o.Resamples == 0 {
		o.Resamples = DefaultResamples
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	return o
}

// BootstrapMedianChange is the percentile bootstrap confidence interval of
// the relative change of medians, relativeChange(median(baseline),
// median(current)). Each resample draws len(baseline) values from baseline
// and len(current) from current, with replacement and independently; the
// interval is the (1-c)/2 and (1+c)/2 quantiles of the resampled changes.
//
// The values are one per run, so the interval is as wide as the runs
// disagree: between-run variance is the noise. With few runs it is coarse:
// at 3 runs a side and 95% it reaches from the lowest current run over the
// highest baseline run to the highest over the lowest, so it excludes 0
// only when every current run is beyond every baseline run. ok is false
// when a side has fewer than 2 values, from which no interval can be formed.
func BootstrapMedianChange(baseline, current []float64, opts BootstrapOptions) (low, high float64, ok bool) {
	if len(baseline) < 2 || len(current) < 2 {
		return 0, 0, false
	}
	opts = opts.withDefaults()
	rng := rand.New(rand.NewPCG(opts.Seed, 0x6770756c6162)) // "gpulab"
	b, c := make([]float64, len(baseline)), make([]float64, len(current))
	changes := make([]float64, opts.Resamples)
	for i := range changes {
		for j := range b {
			b[j] = baseline[rng.IntN(len(baseline))]
		}
		for j := range c {
			c[j] = current[rng.IntN(len(current))]
		}
		changes[i] = relativeChange(MedianOf(b), MedianOf(c))
	}
	slices.Sort(changes)
	alpha := 1 - opts.Confidence
	return quantile(changes, alpha/2), quantile(changes, 1-alpha/2), true
}

// quantile is the nearest-rank q-quantile (0 < q < 1) of sorted values:
// Percentile's rule, the one every percentile of gpulab uses.
func quantile(sorted []float64, q float64) float64 { return Percentile(sorted, q*100) }
