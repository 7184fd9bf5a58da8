package results

import (
	"math"
	"testing"
)

// TestBootstrapMedianChange: the interval of the relative change of medians
// over runs, repeatable, and none from a single run.
func TestBootstrapMedianChange(t *testing.T) {
	base, cur := []float64{10, 10.2, 9.9}, []float64{15, 15.3, 14.8}
	low, high, ok := BootstrapMedianChange(base, cur, BootstrapOptions{})
	if !ok {
		t.Fatal("no interval from 3 runs a side")
	}
	// At 3 runs a side and 95%, the interval spans the extreme ratios:
	// lowest current over highest baseline, highest over lowest.
	if wantLow, wantHigh := 14.8/10.2-1, 15.3/9.9-1; math.Abs(low-wantLow) > 1e-12 || math.Abs(high-wantHigh) > 1e-12 {
		t.Errorf("interval [%v, %v], want [%v, %v]", low, high, wantLow, wantHigh)
	}
	low2, high2, _ := BootstrapMedianChange(base, cur, BootstrapOptions{})
	if low2 != low || high2 != high {
		t.Errorf("a second call gave [%v, %v], the first [%v, %v]: the seed is not fixed", low2, high2, low, high)
	}
	// More runs narrow it; a lower confidence narrows it too.
	many := func(center float64) []float64 {
		var out []float64
		for i := range 20 {
			out = append(out, center*(1+float64(i%5-2)*0.05))
		}
		return out
	}
	l3, h3, _ := BootstrapMedianChange(many(10)[:3], many(15)[:3], BootstrapOptions{})
	l, h, _ := BootstrapMedianChange(many(10), many(15), BootstrapOptions{})
	l80, h80, _ := BootstrapMedianChange(many(10), many(15), BootstrapOptions{Confidence: 0.8})
	if !(l > l3 && h < h3 && l <= 0.5 && h >= 0.5) || !(l80 > l && h80 < h) {
		t.Errorf("20 runs a side: [%v, %v], at 80%% [%v, %v]; want narrower than 3 runs' [%v, %v], around +50%%", l, h, l80, h80, l3, h3)
	}
	for _, sides := range [][2][]float64{{{10}, {15, 16}}, {{10, 11}, {15}}, {nil, {1, 2}}} {
		if _, _, ok := BootstrapMedianChange(sides[0], sides[1], BootstrapOptions{}); ok {
			t.Errorf("an interval from %v against %v", sides[0], sides[1])
		}
	}
}

func TestRelativeChange(t *testing.T) {
	for _, tc := range []struct{ b, c, want float64 }{
		{10, 15, 0.5}, {10, 5, -0.5}, {-10, -5, 0.5}, {0, 0, 0}, {0, 1, math.Inf(1)}, {0, -1, math.Inf(-1)},
	} {
		if got := relativeChange(tc.b, tc.c); got != tc.want {
			t.Errorf("relativeChange(%v, %v) = %v, want %v", tc.b, tc.c, got, tc.want)
		}
	}
}

func TestPercent(t *testing.T) {
	for v, want := range map[float64]string{0.15: "15%", 0.07: "7%", 0.025: "2.5%", 0.95: "95%", 0.999: "99.9%"} {
		if got := percent0(v); got != want {
			t.Errorf("percent0(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]string{0.5: "+50.0%", -0.118: "-11.8%", math.Inf(1): "+inf%", math.Inf(-1): "-inf%"} {
		if got := percent(v); got != want {
			t.Errorf("percent(%v) = %q, want %q", v, got, want)
		}
	}
}
