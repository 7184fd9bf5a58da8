package sidebyside

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpulab/gpulab/conformance/profile"
)

// Limits are an operator's reconcile workers and its API client's QPS and
// burst; the zero Limits keeps that operator's own defaults.
type Limits struct {
	Workers int
	QPS     float64
	Burst   int
}

// The ways to run the two operators (Options.Limits, --limits):
const (
	// LimitsSame runs both at gpulab's shipped defaults, so that neither
	// waits on a limit the other has not (the default).
	LimitsSame = "same"
	// LimitsShipped runs each at its own shipped defaults, as a user who
	// installs both unchanged would.
	LimitsShipped = "shipped"
)

// KubeRay's own defaults (ray-operator v1.6.2, apis/config/v1alpha1),
// which it runs at under LimitsShipped (no flag is passed); the report
// names them.
var kubeRayShipped = Limits{Workers: 1, QPS: 100, Burst: 200}

// gpulab's shipped defaults, the binary's and the chart's.
var gpulabShipped = Limits{Workers: profile.ReconcileConcurrency, QPS: profile.OperatorQPS, Burst: profile.OperatorBurst}

// OperatorLimits are the limits each operator runs at in a comparison; a
// zero Limits passes no flag, so that operator runs at its own defaults.
type OperatorLimits struct {
	// Mode is LimitsSame, LimitsShipped or "WORKERS/QPS/BURST", both at
	// the limits it names.
	Mode            string
	GPULab, KubeRay Limits
}

// ParseLimits reads --limits: "same", "shipped" or "WORKERS/QPS/BURST"
// (e.g. 16/200/400), each a positive number and the burst at least the
// QPS.
func ParseLimits(s string) (OperatorLimits, error) {
	switch s {
	case "", LimitsSame:
		return OperatorLimits{Mode: LimitsSame, KubeRay: gpulabShipped}, nil
	case LimitsShipped:
		return OperatorLimits{Mode: LimitsShipped}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return OperatorLimits{}, fmt.Errorf("%q: want %q, %q or WORKERS/QPS/BURST such as 16/200/400", s, LimitsSame, LimitsShipped)
	}
	workers, errW := strconv.Atoi(parts[0])
	qps, errQ := strconv.ParseFloat(parts[1], 64)
	burst, errB := strconv.Atoi(parts[2])
	if errW != nil || errQ != nil || errB != nil || workers < 1 || qps <= 0 || burst < 1 {
		return OperatorLimits{}, fmt.Errorf("%q: workers, QPS and burst must be positive numbers", s)
	}
	if float64(burst) < qps {
		return OperatorLimits{}, fmt.Errorf("%q: a burst below the QPS throttles every second's requests", s)
	}
	l := Limits{Workers: workers, QPS: qps, Burst: burst}
	return OperatorLimits{Mode: s, GPULab: l, KubeRay: l}, nil
}

// operatorArgs are gpulab-operator's flags for l, none for a zero l.
func (l Limits) operatorArgs() []string {
	if l == (Limits{}) {
		return nil
	}
	return []string{"--reconcile-concurrency=" + strconv.Itoa(l.Workers),
		"--kube-api-qps=" + strconv.FormatFloat(l.QPS, 'g', -1, 64), "--kube-api-burst=" + strconv.Itoa(l.Burst)}
}

func (l Limits) String() string {
	workers := "reconcile workers"
	if l.Workers == 1 {
		workers = "reconcile worker"
	}
	return fmt.Sprintf("%d %s, client QPS %g / burst %d", l.Workers, workers, l.QPS, l.Burst)
}

// describe says, for the report, what each operator ran at.
func (o OperatorLimits) describe() string {
	switch o.Mode {
	case LimitsShipped:
		return fmt.Sprintf("Each operator runs at its own shipped defaults: gpulab at %s; KubeRay at %s (v1.6.2's).", gpulabShipped, kubeRayShipped)
	case LimitsSame:
		return fmt.Sprintf("Both operators run at gpulab's shipped defaults, %s.", gpulabShipped)
	}
	return fmt.Sprintf("Both operators run at %s.", o.GPULab)
}
