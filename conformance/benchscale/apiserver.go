package benchscale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/testbeds/local"
)

// apiServer reads the API server's own view of a run through the
// testbed's admin kubeconfig: what it served (its request and watch-event
// counters) and where its CPU went (its pprof endpoint). On 2 cores the
// API server is most of a burst's CPU, so these say who drives it.
type apiServer struct{ rc rest.Interface }

func newAPIServer(tb *local.Testbed) (*apiServer, error) {
	cfg, err := tb.RESTConfig()
	if err != nil {
		return nil, err
	}
	// A CPU profile holds the request open for its whole duration.
	cfg.Timeout = 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &apiServer{rc: cs.CoreV1().RESTClient()}, nil
}

// Request kinds are "VERB resource[/subresource]" for requests served,
// with " (code)" when not a success, and "watch events resource" for
// events sent to watchers.
const watchEventsPrefix = "watch events "

// requests reads the API server's counters by request kind.
func (a *apiServer) requests(ctx context.Context) (map[string]float64, error) {
	body, err := a.rc.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	s, err := measure.ParseScrape(body)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	out := map[string]float64{}
	for _, m := range s["apiserver_request_total"].GetMetric() {
		l := labels(m.GetLabel())
		kind := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			kind += "/" + l["subresource"]
		}
		if code := l["code"]; code != "" && code[0] != '2' {
			kind += " (" + code + ")"
		}
		out[kind] += m.GetCounter().GetValue()
	}
	for _, m := range s["apiserver_watch_events_total"].GetMetric() {
		out[watchEventsPrefix+labels(m.GetLabel())["resource"]] += m.GetCounter().GetValue()
	}
	return out, nil
}

// cpuProfile saves a CPU profile of the next seconds to path.
func (a *apiServer) cpuProfile(ctx context.Context, seconds int, path string) error {
	body, err := a.rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("profiling the API server: %w", err)
	}
	return os.WriteFile(path, body, 0o644)
}

func labels(pairs []*dto.LabelPair) map[string]string {
	out := make(map[string]string, len(pairs))
	for _, l := range pairs {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// writeJSON saves v, indented, to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// delta is after minus before, kinds that did not move left out.
func delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
