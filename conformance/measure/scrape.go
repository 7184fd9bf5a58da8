package measure

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	neturl "net/url"
	"os"
	"sort"
	"strings"
	"time"

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

// Prometheus is the suite's client of a Prometheus HTTP API (or of one that
// speaks it: Thanos, Mimir, VictoriaMetrics).
type Prometheus struct {
	URL string
	// tokenFile is read on every request, not once: a projected
	// service-account token is rotated in place and a run can outlast it.
	// The token itself is never kept, logged or put in an error.
	tokenFile string
	client    *http.Client
}

// NewPrometheus is a client of the Prometheus API at url. bearerTokenFile,
// when given, holds the token sent as "Authorization: Bearer"; it is read
// now, to fail early, and again on every request. caFile, when given, is a
// PEM bundle of the CAs that sign the server's certificate: it replaces the
// system roots, as Prometheus's own tls_config.ca_file and kubectl's
// --certificate-authority do.
func NewPrometheus(url, bearerTokenFile, caFile string) (*Prometheus, error) {
	p := &Prometheus{URL: strings.TrimSuffix(url, "/"), tokenFile: bearerTokenFile, client: http.DefaultClient}
	if bearerTokenFile != "" {
		if _, err := ReadBearerToken(bearerTokenFile); err != nil {
			return nil, err
		}
	}
	if caFile != "" {
		pool, err := LoadCAFile(caFile)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		p.client = &http.Client{Transport: tr}
	}
	return p, nil
}

// ReadBearerToken reads a bearer token file. Surrounding whitespace is
// dropped (a file written by echo ends in a newline); an empty token is an
// error, since it would be sent as a bare "Bearer".
func ReadBearerToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the bearer token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("bearer token file %s is empty", path)
	}
	return tok, nil
}

// LoadCAFile reads a PEM bundle of CA certificates. Every CERTIFICATE
// block must parse, and there must be one: a bundle that silently holds
// none would only fail later, as an unknown-authority TLS error.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA file %s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("CA file %s holds no PEM CERTIFICATE block", path)
	}
	return pool, nil
}

// get reads one API path, with the bearer token when one is configured.
func (p *Prometheus) get(ctx context.Context, path string, q neturl.Values) ([]byte, string, error) {
	u := p.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", err
	}
	if p.tokenFile != "" {
		tok, err := ReadBearerToken(p.tokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("querying Prometheus at %s: %w", p.URL, err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	client := p.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("querying Prometheus at %s: %w", p.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, "", fmt.Errorf("querying Prometheus at %s: %w", p.URL, err)
	}
	return body, resp.Status, nil
}

// promSample is one element of an instant vector: its labels, the
// evaluation time and the value, both as the API writes them.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query at the server's own now (no time parameter:
// ages are then measured on the server's clock, not the suite's) and
// returns the vector.
func (p *Prometheus) query(ctx context.Context, query string) ([]promSample, error) {
	body, status, err := p.get(ctx, "/api/v1/query", neturl.Values{"query": {query}})
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("querying Prometheus at %s: %s: not a Prometheus API answer: %w", p.URL, status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("querying Prometheus at %s: %q: %s: %s", p.URL, query, status, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("querying Prometheus at %s: %q returned a %s, want a vector", p.URL, query, r.Data.ResultType)
	}
	var out []promSample
	if err := json.Unmarshal(r.Data.Result, &out); err != nil {
		return nil, fmt.Errorf("querying Prometheus at %s: %q: %w", p.URL, query, err)
	}
	return out, nil
}

// targetKey names a scrape target by the job and instance labels it gives
// its series.
type targetKey struct{ job, instance string }

// scrapeIntervals are the active targets' scrape intervals, from
// /api/v1/targets (Prometheus 2.35 and later report them). Stores that
// serve no such endpoint (Thanos Querier, Mimir) answer an error, and the
// caller falls back to a default.
func (p *Prometheus) scrapeIntervals(ctx context.Context) (map[targetKey]time.Duration, error) {
	body, status, err := p.get(ctx, "/api/v1/targets", neturl.Values{"state": {"active"}})
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ActiveTargets []struct {
				Labels         map[string]string `json:"labels"`
				ScrapeInterval string            `json:"scrapeInterval"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		return nil, errors.Join(fmt.Errorf("Prometheus at %s: %s: no target list", p.URL, status), err)
	}
	out := map[targetKey]time.Duration{}
	for _, t := range r.Data.ActiveTargets {
		if d, err := model.ParseDuration(t.ScrapeInterval); err == nil && d > 0 {
			out[targetKey{t.Labels["job"], t.Labels["instance"]}] = time.Duration(d)
		}
	}
	return out, nil
}
