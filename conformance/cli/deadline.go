package cli

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// BackstopGrace is how long after --timeout Go's own -test.timeout fires.
// That alarm panics the test binary: no Finish hook runs, so nothing is
// cleaned up and no results are written. The suite's deadline (Deadline)
// is what ends a run; the alarm is kept only for a run stuck in something
// that ignores its context. It times only the tests (not the cluster's
// setup or the final cleanup), and after the deadline the one assessment
// still running has its own cleanup to finish (a few minutes at most), so
// this leaves that room several times over.
const BackstopGrace = 15 * time.Minute

// TimeoutError is the cause of a run's context when --timeout passed.
type TimeoutError struct {
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("--timeout=%s passed before the run finished", e.Timeout)
}

// IsTimeout says whether err (a context's cause) is the run's --timeout.
func IsTimeout(err error) bool {
	var te *TimeoutError
	return errors.As(err, &te)
}

// Deadline is the run's context: it ends --timeout after now, with a
// TimeoutError as its cause, so every wait of the suite stops there and
// the run can still clean up and report.
func (o *RunOptions) Deadline(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(parent, o.Timeout, &TimeoutError{Timeout: o.Timeout})
}
