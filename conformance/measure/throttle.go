package measure

import (
	"fmt"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// rateLimiterMetric is client-go's histogram of the time each request
// waited in its client's own rate limiter, which controller-runtime's
// registry carries once enabled.
const rateLimiterMetric = "rest_client_rate_limiter_duration_seconds"

// ClientThrottle is how long this process's API clients have waited in
// their own rate limiters so far: the suite's throttling, which is not
// the stack's and is reported apart from every phase.
type ClientThrottle struct {
	Seconds  float64
	Requests uint64
}

// EnableClientThrottle turns on the histogram ReadClientThrottle reads.
// Call it before the clients are made.
func EnableClientThrottle() {
	crmetrics.RegisterRESTClientMetrics(crmetrics.MetricRateLimiterLatency)
}

// ReadClientThrottle sums the histogram over every verb and host.
func ReadClientThrottle() (ClientThrottle, error) {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return ClientThrottle{}, fmt.Errorf("gathering client metrics: %w", err)
	}
	var out ClientThrottle
	for _, f := range families {
		if f.GetName() != rateLimiterMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			out.Seconds += m.GetHistogram().GetSampleSum()
			out.Requests += m.GetHistogram().GetSampleCount()
		}
	}
	return out, nil
}

// Sub is what was waited between two readings.
func (c ClientThrottle) Sub(before ClientThrottle) ClientThrottle {
	return ClientThrottle{Seconds: c.Seconds - before.Seconds, Requests: c.Requests - before.Requests}
}
