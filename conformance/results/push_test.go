package results

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// Two clusters of one profile, and two workloads on one cluster, must land
// in groups of their own, or a later push replaces the earlier series.
func TestPushGroupsByCluster(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		paths = append(paths, req.Method+" "+req.URL.Path)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	runs := []Environment{
		{Profile: "cluster", ClusterName: "lab-a"},
		{Profile: "cluster", ClusterName: "lab-b"},
		{Profile: "cluster", ClusterName: "lab-b", Workload: "raycluster"},
	}
	for _, env := range runs {
		r := &Results{Environment: env,
			Features:     []Feature{{Name: "gang", Assessments: []Assessment{{Name: "a", Status: StatusPassed}}}},
			Measurements: []Measurement{Value("latency", "ready", "seconds", 1)}}
		if err := Push(context.Background(), srv.URL, r); err != nil {
			t.Fatal(err)
		}
	}
	if len(paths) != len(runs) {
		t.Fatalf("pushes %v, want %d", paths, len(runs))
	}
	for i, env := range runs {
		got := pushGrouping(t, paths[i])
		if want := map[string]string{"profile": "cluster", "cluster": env.ClusterName, "workload": env.WorkloadName()}; !reflect.DeepEqual(got, want) {
			t.Errorf("push %d (%s) grouped by %v, want %v", i, paths[i], got, want)
		}
	}
}

func TestPushCluster(t *testing.T) {
	if got := PushCluster(Environment{Profile: "kind", ClusterName: "ci-1"}); got != "ci-1" {
		t.Errorf("PushCluster with a name = %q, want ci-1", got)
	}
	if got := PushCluster(Environment{Profile: "kind"}); got != "kind" {
		t.Errorf("PushCluster without a name = %q, want the profile", got)
	}
}

// pushGrouping reads the grouping labels out of a Pushgateway request line
// "PUT /metrics/job/<job>/<label>/<value>/...", checking the job. The
// client writes the labels in map order, so they come back as a map.
func pushGrouping(t *testing.T, line string) map[string]string {
	t.Helper()
	_, path, _ := strings.Cut(line, " ")
	parts := strings.Split(strings.TrimPrefix(path, "/metrics/"), "/")
	if len(parts) < 2 || len(parts)%2 != 0 || parts[0] != "job" || parts[1] != PushJob {
		t.Fatalf("push path %q, want /metrics/job/%s/<label>/<value>...", path, PushJob)
	}
	out := map[string]string{}
	for i := 2; i < len(parts); i += 2 {
		out[parts[i]] = parts[i+1]
	}
	return out
}
