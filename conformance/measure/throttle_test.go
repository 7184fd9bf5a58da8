package measure

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A client allowed one request a second waits in its own limiter for the
// second of two, and the reading says so.
func TestClientThrottleCountsTheLimitersWait(t *testing.T) {
	EnableClientThrottle()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"x"}}`))
	}))
	defer srv.Close()
	c := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL, QPS: 5, Burst: 1})
	before, err := ReadClientThrottle()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.CoreV1().Namespaces().Get(context.Background(), "x", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := ReadClientThrottle()
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	// Burst 1 at 5/s: the 2nd and 3rd requests wait about 0.2 s each.
	if d.Requests != 3 || d.Seconds < 0.3 {
		t.Errorf("throttle %+v, want 3 requests and ≥ 0.3 s waited", d)
	}
}
