package bare

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// ClientInput configures Client.
type ClientInput struct {
	// Config is the suite's; it is copied, never changed. Required.
	Config *rest.Config
	// Scheme knows core and Volcano's scheduling types. Required.
	Scheme *runtime.Scheme
	// QPS and Burst limit requests per API resource, as client-go limits
	// each of a controller-runtime client's per-kind REST clients: an
	// operator's limits (profile.OperatorQPS, OperatorBurst). Required
	// unless Unlimited.
	QPS   float32
	Burst int
	// Unlimited sends every request at once, with no limiter at all: the
	// ideal operator the floor is (Floor), whose own limits must not be
	// what a run measures. QPS and Burst are then ignored.
	Unlimited bool
}

// Client is a client for creating the gangs' children and writing their
// statuses: limited as an operator's is, or not at all (Unlimited).
// client-go's own limiter is off either way; a limit is applied in its
// transport, so its waits stay out of the suite's
// rest_client_rate_limiter_duration_seconds: they are the stack's, inside
// the phases, not the suite's throttling reported apart. Its REST
// mappings for the kinds it writes are read now, as a running operator
// has them, not on the first gang's creates.
func Client(in ClientInput) (client.Client, error) {
	if in.Config == nil || in.Scheme == nil || (!in.Unlimited && (in.QPS <= 0 || in.Burst < 1)) {
		return nil, fmt.Errorf("bare client: a config, a scheme, and QPS > 0 and burst >= 1 or Unlimited are required")
	}
	cfg := rest.CopyConfig(in.Config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil // negative: client-go's limiter off
	if !in.Unlimited {
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return &limited{next: rt, qps: in.QPS, burst: in.Burst, buckets: map[string]flowcontrol.RateLimiter{}}
		})
	}
	c, err := client.New(cfg, client.Options{Scheme: in.Scheme})
	if err != nil {
		return nil, fmt.Errorf("bare client: %w", err)
	}
	var errs []error
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Service{}, &schedulingv1beta1.PodGroup{}, &corev1.ConfigMap{}} {
		gvk, err := c.GroupVersionKindFor(obj)
		if err == nil {
			_, err = c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bare client: %w", err)
	}
	return c, nil
}

// limited waits in a token bucket per API resource before each request.
type limited struct {
	next    http.RoundTripper
	qps     float32
	burst   int
	mu      sync.Mutex
	buckets map[string]flowcontrol.RateLimiter
}

func (l *limited) RoundTrip(req *http.Request) (*http.Response, error) {
	key := resourceOf(req.URL.Path)
	l.mu.Lock()
	b, ok := l.buckets[key]
	if !ok {
		b = flowcontrol.NewTokenBucketRateLimiter(l.qps, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	if err := b.Wait(req.Context()); err != nil {
		return nil, err
	}
	return l.next.RoundTrip(req)
}

// resourceOf is the API resource a request path is about, with its group
// and version ("api/v1/pods", "apis/scheduling.volcano.sh/v1beta1/podgroups"),
// namespace and name left out; discovery paths are themselves.
func resourceOf(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var gv, rest []string
	switch {
	case len(segs) >= 3 && segs[0] == "api":
		gv, rest = segs[:2], segs[2:]
	case len(segs) >= 4 && segs[0] == "apis":
		gv, rest = segs[:3], segs[3:]
	default:
		return strings.Join(segs, "/")
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:] // namespaces/<ns>/<resource>...
	}
	return strings.Join(gv, "/") + "/" + rest[0]
}
