// Package testutil holds what the operator's tests share: an API traffic
// counter with fault injection (wrapped around a rest.Config's transport),
// one envtest API server per package with GPU nodes, a running operator,
// and stand-ins for the scheduler and kubelet envtest lacks.
package testutil

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Traffic counts a client's API requests and can inject faults.
type Traffic struct {
	mu     sync.Mutex
	writes map[string]int // "POST pods" → count of 2xx responses
	// refused counts the writes the API server answered with an error.
	refused map[string]int
	status  map[int]int // response codes of GPUCluster status writes
	// FailStatusWrites makes every status write fail with a 500.
	FailStatusWrites atomic.Bool
	// FailRequest, when set, fails every request it returns true for with a
	// 500, before the request reaches the API server.
	FailRequest func(*http.Request) bool
	// BeforeStatusWrite runs once before the first status write is sent.
	BeforeStatusWrite func()
	hookOnce          sync.Once
}

// NewTraffic returns an empty counter.
func NewTraffic() *Traffic {
	return &Traffic{writes: map[string]int{}, refused: map[string]int{}, status: map[int]int{}}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Wrap counts requests through next; use it with rest.Config.Wrap.
func (a *Traffic) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if a.FailRequest != nil && a.FailRequest(r) {
			return injectedFault(r), nil
		}
		isStatus := r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status") && strings.Contains(r.URL.Path, "/gpuclusters/")
		if isStatus {
			if a.FailStatusWrites.Load() {
				return injectedFault(r), nil
			}
			if a.BeforeStatusWrite != nil {
				a.hookOnce.Do(a.BeforeStatusWrite)
			}
		}
		resp, err := next.RoundTrip(r)
		if err != nil || r.Method == http.MethodGet {
			return resp, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if isStatus {
			a.status[resp.StatusCode]++
		}
		if resp.StatusCode < 300 {
			a.writes[r.Method+" "+resourceOf(r.URL.Path)]++
		} else {
			a.refused[r.Method+" "+resourceOf(r.URL.Path)]++
		}
		return resp, err
	})
}

// resourceOf reduces an API path to its resource (and subresource).
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			if len(rest) == 3 {
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	if len(parts) > 0 {
		return parts[len(parts)-1]
	}
	return path
}

// Count is the number of successful writes for "METHOD resource".
func (a *Traffic) Count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.writes[key]
}

// Refused is the number of writes for "METHOD resource" the API server
// answered with an error.
func (a *Traffic) Refused(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refused[key]
}

// Snapshot copies the successful writes by "METHOD resource".
func (a *Traffic) Snapshot() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for k, v := range a.writes {
		out[k] = v
	}
	return out
}

// StatusCodes returns how many GPUCluster status writes got each code.
func (a *Traffic) StatusCodes() map[int]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[int]int{}
	for k, v := range a.status {
		out[k] = v
	}
	return out
}

// injectedFault is the API server error a faulty request gets.
func injectedFault(r *http.Request) *http.Response {
	return &http.Response{StatusCode: http.StatusInternalServerError,
		Body:   io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected fault","code":500}`)),
		Header: http.Header{"Content-Type": []string{"application/json"}}, Request: r}
}
