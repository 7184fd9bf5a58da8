package binaries

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrometheusRelease(t *testing.T) {
	for module, want := range map[string]string{"v0.316.0": "3.16.0", "v0.305.1": "3.5.1", "v0.300.0": "3.0.0"} {
		got, err := prometheusRelease(module)
		if err != nil || got != want {
			t.Errorf("prometheusRelease(%q) = %q, %v; want %q", module, got, err, want)
		}
	}
	for _, bad := range []string{"v2.53.0", "v0.3", "v0.316", "v0.54.1"} {
		if got, err := prometheusRelease(bad); err == nil {
			t.Errorf("prometheusRelease(%q) = %q, want an error", bad, got)
		}
	}
}

// TestLookupMonitoring finds the tools in <cache>/bin/<component>-<version>/
// and, when one is missing, says how to build it.
func TestLookupMonitoring(t *testing.T) {
	cache := t.TempDir()
	opts := Options{CacheDir: cache}
	if _, err := LookupMonitoring(t.Context(), opts); err == nil || !strings.Contains(err.Error(), "make testbed-binaries") {
		t.Fatalf("LookupMonitoring on an empty cache: %v, want an error naming make testbed-binaries", err)
	}
	for _, c := range monitoringComponents {
		dir := filepath.Join(cache, "bin", c.name+"-"+c.version)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, bin := range c.binaries {
			if err := os.WriteFile(filepath.Join(dir, bin), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	m, err := LookupMonitoring(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for got, want := range map[string]string{
		m.Prometheus:  filepath.Join(cache, "bin", "prometheus-"+PrometheusVersion, "prometheus"),
		m.Promtool:    filepath.Join(cache, "bin", "prometheus-"+PrometheusVersion, "promtool"),
		m.Pushgateway: filepath.Join(cache, "bin", "pushgateway-"+PushgatewayVersion, "pushgateway"),
	} {
		if got != want {
			t.Errorf("path %s, want %s", got, want)
		}
	}
}
