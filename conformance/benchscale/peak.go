package benchscale

import (
	"context"
	"fmt"
	"time"

	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/profile"
)

// peakHeapFile is the operator's heap profile taken when the burst's gangs
// are all Ready: the profile after the run shows a drained operator, not
// what a gang costs.
const peakHeapFile = "heap-peak.pprof"

// heapAtPeak waits until the operator reports at least n GPUClusters Ready
// (its gpulab_clusters gauge, scraped alone) and saves its heap profile
// to path. It gives up when ctx ends, as when the run ends first.
func heapAtPeak(ctx context.Context, op *profile.OperatorProcess, n int, path string) error {
	url, err := measure.Only(op.MetricsURL(), "gpulab_clusters")
	if err != nil {
		return err
	}
	// Not poll.Until's 100 ms: every scrape is work for the operator
	// being measured.
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	ready := 0.0
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no heap profile at the peak: the operator reported %.0f of %d GPUClusters Ready before the run ended", ready, n)
		case <-tick.C:
		}
		s, err := measure.ScrapeURL(ctx, url)
		if err != nil {
			continue
		}
		if ready = s.Sum("gpulab_clusters", map[string]string{"phase": "Ready"}); ready >= float64(n) {
			return fetch(ctx, op.PprofURL()+"heap", path)
		}
	}
}
