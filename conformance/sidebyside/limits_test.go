package sidebyside

import (
	"slices"
	"strings"
	"testing"
)

func TestParseLimits(t *testing.T) {
	for _, tc := range []struct {
		in              string
		gpulab, kuberay Limits
	}{
		// Both at gpulab's shipped limits: KubeRay is given them, gpulab
		// runs without flags.
		{"same", Limits{}, gpulabShipped},
		{"", Limits{}, gpulabShipped},
		// Each at its own defaults: neither gets a flag.
		{"shipped", Limits{}, Limits{}},
		{"16/200/400", Limits{16, 200, 400}, Limits{16, 200, 400}},
		{"8/7.5/8", Limits{8, 7.5, 8}, Limits{8, 7.5, 8}},
	} {
		got, err := ParseLimits(tc.in)
		if err != nil {
			t.Errorf("ParseLimits(%q): %v", tc.in, err)
			continue
		}
		if got.GPULab != tc.gpulab || got.KubeRay != tc.kuberay {
			t.Errorf("ParseLimits(%q) = gpulab %+v, KubeRay %+v; want %+v, %+v", tc.in, got.GPULab, got.KubeRay, tc.gpulab, tc.kuberay)
		}
	}
	for _, bad := range []string{"fast", "16/200", "16/200/400/1", "0/200/400", "16/0/400", "16/-1/400", "x/200/400", "16/200/100", "16/200/0"} {
		if _, err := ParseLimits(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseLimits(%q) = %v, want an error naming it", bad, err)
		}
	}
}

func TestLimitsBecomeFlagsAndReport(t *testing.T) {
	if args := (Limits{}).operatorArgs(); args != nil {
		t.Errorf("a zero Limits passes %v, want no flag", args)
	}
	want := []string{"--reconcile-concurrency=16", "--kube-api-qps=200", "--kube-api-burst=400"}
	if got := (Limits{16, 200, 400}).operatorArgs(); !slices.Equal(got, want) {
		t.Errorf("operatorArgs = %v, want %v", got, want)
	}
	for mode, want := range map[string]string{
		"same":       "Both operators run at gpulab's shipped defaults, 64 reconcile workers, client QPS 1000 / burst 2000.",
		"shipped":    "gpulab at 64 reconcile workers, client QPS 1000 / burst 2000; KubeRay at 1 reconcile worker, client QPS 100 / burst 200",
		"16/200/400": "Both operators run at 16 reconcile workers, client QPS 200 / burst 400.",
	} {
		l, err := ParseLimits(mode)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.describe(); !strings.Contains(got, want) {
			t.Errorf("%s: report says %q, want %q in it", mode, got, want)
		}
	}
}
