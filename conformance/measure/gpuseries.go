package measure

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// GPUSeriesFlavour is one exporter's names for the per-GPU series the
// accelerator-metrics requirement asks for.
type GPUSeriesFlavour struct {
	Exporter, Utilization, MemoryUsed string
}

// GPUSeriesFlavours are gpulab's agent and NVIDIA's DCGM exporter; both
// label each series with the GPU's UUID.
var GPUSeriesFlavours = []GPUSeriesFlavour{
	{Exporter: "gpulab-agent", Utilization: "gpulab_gpu_utilization_ratio", MemoryUsed: "gpulab_gpu_memory_used_bytes"},
	{Exporter: "dcgm-exporter", Utilization: "DCGM_FI_DEV_GPU_UTIL", MemoryUsed: "DCGM_FI_DEV_FB_USED"},
}

// UUIDsByMetric is, per metric name, the GPU UUIDs that have a series.
type UUIDsByMetric map[string]map[string]bool

// MissingGPUSeries names, for each GPU UUID, what it lacks: a GPU passes
// when one exporter has both its utilization and memory series. It also
// returns the exporters seen.
func MissingGPUSeries(have UUIDsByMetric, uuids []string) (missing []string, exporters []string) {
	seen := map[string]bool{}
	for _, uuid := range uuids {
		ok := false
		for _, f := range GPUSeriesFlavours {
			if have[f.Utilization][uuid] && have[f.MemoryUsed][uuid] {
				ok = true
				if !seen[f.Exporter] {
					seen[f.Exporter] = true
					exporters = append(exporters, f.Exporter)
				}
			}
		}
		if !ok {
			missing = append(missing, fmt.Sprintf("GPU %s has no utilization and memory series (%s)", uuid, flavourNames()))
		}
	}
	return missing, exporters
}

func flavourNames() string {
	var names []string
	for _, f := range GPUSeriesFlavours {
		names = append(names, f.Utilization+" + "+f.MemoryUsed)
	}
	return strings.Join(names, ", or ")
}

// UUIDsInScrape reads the per-GPU series of a /metrics scrape.
func UUIDsInScrape(s Scrape) UUIDsByMetric {
	out := UUIDsByMetric{}
	for _, f := range GPUSeriesFlavours {
		for _, metric := range []string{f.Utilization, f.MemoryUsed} {
			for _, m := range s[metric].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "UUID" {
						add(out, metric, l.GetValue())
					}
				}
			}
		}
	}
	return out
}

// UUIDsInPrometheus asks a Prometheus server (its HTTP API at base) which
// GPUs have each per-GPU series now.
func UUIDsInPrometheus(ctx context.Context, base string) (UUIDsByMetric, error) {
	out := UUIDsByMetric{}
	for _, f := range GPUSeriesFlavours {
		for _, metric := range []string{f.Utilization, f.MemoryUsed} {
			uuids, err := queryLabelValues(ctx, base, "group by (UUID) ("+metric+")", "UUID")
			if err != nil {
				return nil, err
			}
			for _, u := range uuids {
				add(out, metric, u)
			}
		}
	}
	return out, nil
}

func add(m UUIDsByMetric, metric, uuid string) {
	if m[metric] == nil {
		m[metric] = map[string]bool{}
	}
	m[metric][uuid] = true
}

// queryLabelValues runs an instant query and returns one label's values
// over the resulting vector.
func queryLabelValues(ctx context.Context, base, query, label string) ([]string, error) {
	u := strings.TrimSuffix(base, "/") + "/api/v1/query?" + url.Values{"query": {query}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("querying Prometheus at %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("querying Prometheus at %s: %w", base, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("querying Prometheus at %s: %s: not a Prometheus API answer: %w", base, resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("querying Prometheus at %s: %q: %s", base, query, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("querying Prometheus at %s: %q returned a %s, want a vector", base, query, r.Data.ResultType)
	}
	var out []string
	for _, s := range r.Data.Result {
		if v := s.Metric[label]; v != "" {
			out = append(out, v)
		}
	}
	return out, nil
}
