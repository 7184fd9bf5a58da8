package measure

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMissingGPUSeries(t *testing.T) {
	have := UUIDsByMetric{
		"gpulab_gpu_utilization_ratio": {"GPU-a": true, "GPU-b": true},
		"gpulab_gpu_memory_used_bytes": {"GPU-a": true},
		"DCGM_FI_DEV_GPU_UTIL":         {"GPU-c": true},
		"DCGM_FI_DEV_FB_USED":          {"GPU-c": true},
	}
	missing, exporters := MissingGPUSeries(have, []string{"GPU-a", "GPU-b", "GPU-c", "GPU-d"})
	if len(missing) != 2 || !strings.Contains(missing[0], "GPU-b") || !strings.Contains(missing[1], "GPU-d") {
		t.Errorf("missing %q, want GPU-b (utilization only) and GPU-d (nothing)", missing)
	}
	if strings.Join(exporters, ",") != "gpulab-agent,dcgm-exporter" {
		t.Errorf("exporters %v", exporters)
	}
}

// A utilization series from one exporter and memory from the other is not
// one exporter's complete view.
func TestMissingGPUSeriesNeedsOneExporter(t *testing.T) {
	have := UUIDsByMetric{"gpulab_gpu_utilization_ratio": {"GPU-a": true}, "DCGM_FI_DEV_FB_USED": {"GPU-a": true}}
	if missing, _ := MissingGPUSeries(have, []string{"GPU-a"}); len(missing) != 1 {
		t.Errorf("missing %q, want GPU-a", missing)
	}
}

func TestUUIDsInPrometheus(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		queries = append(queries, q)
		if strings.Contains(q, "DCGM") {
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"UUID":"GPU-a"},"value":[1,"1"]},{"metric":{"UUID":"GPU-b"},"value":[1,"1"]}]}}`)
	}))
	defer srv.Close()
	got, err := UUIDsInPrometheus(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) != 4 || queries[0] != "group by (UUID) (gpulab_gpu_utilization_ratio)" {
		t.Errorf("queries %q", queries)
	}
	if !got["gpulab_gpu_memory_used_bytes"]["GPU-b"] || len(got["DCGM_FI_DEV_GPU_UTIL"]) != 0 {
		t.Errorf("got %v", got)
	}
}

func TestUUIDsInPrometheusErrors(t *testing.T) {
	for name, body := range map[string]string{
		"error status": `{"status":"error","errorType":"bad_data","error":"parse error"}`,
		"not the API":  `<html>login</html>`,
		"matrix":       `{"status":"success","data":{"resultType":"matrix","result":[]}}`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }))
		if _, err := UUIDsInPrometheus(context.Background(), srv.URL); err == nil {
			t.Errorf("%s: no error", name)
		}
		srv.Close()
	}
}
