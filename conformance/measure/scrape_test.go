package measure

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestOnlyFiltersAtTheSource checks Only against Prometheus's own Go
// handler: the filtered page holds the named metric and not the others.
func TestOnlyFiltersAtTheSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{"wanted_bytes", "other_total"} {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: name})
		g.Set(42)
		reg.MustRegister(g)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	url, err := Only(srv.URL+"/metrics?x=1", "wanted_bytes")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ScrapeURL(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sum("wanted_bytes", nil); got != 42 {
		t.Errorf("wanted_bytes = %v, want 42", got)
	}
	if _, ok := s["other_total"]; ok {
		t.Errorf("the filtered page holds other_total too: %v", s)
	}
	if _, err := Only("http://[::1]:namedport/metrics", "x"); err == nil {
		t.Error("a malformed URL must be refused")
	}
}
