package dashboards_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// promAPI is a minimal client of Prometheus's HTTP API.
type promAPI struct{ base string }

func (p *promAPI) get(ctx context.Context, path string, q url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// variableValues answers a variable's query as Grafana does:
// label_values(selector, label) from the series API over [start, now],
// query_result(expr) from an instant query at now, each result line
// (`{label="value", ...} value timestamp`) cut down to regex's first group.
func (p *promAPI) variableValues(ctx context.Context, query, regex string, start time.Time) ([]string, error) {
	if m := queryResultRE.FindStringSubmatch(query); m != nil {
		return p.queryResult(ctx, m[1], regex)
	}
	m := labelValuesRE.FindStringSubmatch(query)
	if m == nil {
		return nil, fmt.Errorf("unsupported variable query %q", query)
	}
	var series []map[string]string
	q := url.Values{"match[]": {m[1]}, "start": {unix(start)}, "end": {unix(time.Now())}}
	if err := p.get(ctx, "/api/v1/series", q, &series); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range series {
		if v, ok := s[m[2]]; ok && v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (p *promAPI) queryResult(ctx context.Context, expr, regex string) ([]string, error) {
	re, err := grafanaRegex(regex)
	if err != nil {
		return nil, err
	}
	var res struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		} `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(time.Now())}}, &res); err != nil {
		return nil, err
	}
	var out []string
	for _, r := range res.Result {
		labels := make([]string, 0, len(r.Metric))
		for k, v := range r.Metric {
			labels = append(labels, fmt.Sprintf("%s=%q", k, v))
		}
		slices.Sort(labels)
		line := fmt.Sprintf("{%s} %v %v", strings.Join(labels, ", "), r.Value[1], r.Value[0])
		if m := re.FindStringSubmatch(line); m != nil && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return out, nil
}

// values runs expr as an instant query at now or a range query over
// [start, now] and counts the series with at least one non-NaN value keep
// accepts. A parse error is returned as an error.
func (p *promAPI) values(ctx context.Context, expr string, instant bool, start time.Time, keep func(float64) bool) (int, error) {
	var res struct {
		Result []struct {
			Value  []any   `json:"value"`
			Values [][]any `json:"values"`
		} `json:"result"`
	}
	now := time.Now()
	if instant {
		if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(now)}}, &res); err != nil {
			return 0, err
		}
	} else {
		q := url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(now)}, "step": {"5"}}
		if err := p.get(ctx, "/api/v1/query_range", q, &res); err != nil {
			return 0, err
		}
	}
	n := 0
	for _, r := range res.Result {
		points := r.Values
		if r.Value != nil {
			points = append(points, r.Value)
		}
		for _, pt := range points {
			if s, ok := pt[1].(string); ok {
				if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && keep(f) {
					n++
					break
				}
			}
		}
	}
	return n, nil
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
