package measure

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	neturl "net/url"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one read of a Prometheus text endpoint.
type Scrape map[string]*dto.MetricFamily

// ScrapeURL reads url's metrics.
func ScrapeURL(ctx context.Context, url string) (Scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return parse(resp.Body)
}

// Only is url asking for the named metrics alone (the `name[]` filter of
// Prometheus's Go handler, which controller-runtime serves): a sampler
// polling one gauge then costs the process it watches a few series, not
// its whole registry. A server that does not filter answers with every
// metric, which reads the same.
func Only(url string, names ...string) (string, error) {
	u, err := neturl.Parse(url)
	if err != nil {
		return "", fmt.Errorf("metrics URL %q: %w", url, err)
	}
	q := u.Query()
	for _, n := range names {
		q.Add("name[]", n)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// ParseScrape reads a metrics page already fetched.
func ParseScrape(page []byte) (Scrape, error) { return parse(bytes.NewReader(page)) }

func parse(r io.Reader) (Scrape, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	return Scrape(families), err
}

// Sum adds every sample of a counter or gauge whose labels include match.
func (s Scrape) Sum(name string, match map[string]string) float64 {
	f, ok := s[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		if !labelsMatch(m, match) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

// HistogramQuantileDelta estimates quantile q of the observations a
// histogram gained between before and after (linear within a bucket, as
// PromQL's histogram_quantile does).
func HistogramQuantileDelta(before, after Scrape, name string, match map[string]string, q float64) float64 {
	buckets := map[float64]float64{}
	collect := func(s Scrape, sign float64) {
		f, ok := s[name]
		if !ok {
			return
		}
		for _, m := range f.GetMetric() {
			if m.Histogram == nil || !labelsMatch(m, match) {
				continue
			}
			for _, b := range m.GetHistogram().GetBucket() {
				buckets[b.GetUpperBound()] += sign * float64(b.GetCumulativeCount())
			}
		}
	}
	collect(after, 1)
	collect(before, -1)
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0
	}
	total := buckets[bounds[len(bounds)-1]]
	if math.IsInf(bounds[len(bounds)-1], 1) {
		total = buckets[bounds[len(bounds)-1]]
	}
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		count := buckets[b]
		if count >= rank {
			if math.IsInf(b, 1) {
				return prevBound
			}
			if count == prevCount {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(count-prevCount)
		}
		prevBound, prevCount = b, count
	}
	return prevBound
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && (l.GetValue() == v || (strings.HasSuffix(v, "*") && strings.HasPrefix(l.GetValue(), strings.TrimSuffix(v, "*")))) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
