package measure

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestHistogramQuantileDelta(t *testing.T) {
	hist := func(counts ...uint64) Scrape {
		bounds := []float64{0.1, 1, 10}
		var buckets []*dto.Bucket
		for i, b := range bounds {
			buckets = append(buckets, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(counts[i])})
		}
		return Scrape{"h": &dto.MetricFamily{Name: proto.String("h"), Metric: []*dto.Metric{{Histogram: &dto.Histogram{Bucket: buckets}}}}}
	}
	before := hist(10, 10, 10)
	after := hist(10, 60, 110) // the run added 50 in (0.1,1] and 50 in (1,10]
	if got := HistogramQuantileDelta(before, after, "h", nil, 0.5); got < 0.99 || got > 1.01 {
		t.Errorf("p50 = %v, want 1", got)
	}
	if got := HistogramQuantileDelta(before, after, "h", nil, 0.99); got < 9.7 || got > 9.9 {
		t.Errorf("p99 = %v, want ~9.82", got)
	}
}
