package runlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/cleanup"
)

const (
	// LockName is the cluster's run lock: one Lease for the suite.
	LockName = "gpulab-conformance"
	// DefaultNamespace holds the lock and the markers (see the package
	// comment for why "default").
	DefaultNamespace = "default"
	// MarkerLabel marks a run's marker with its run id, so cleanup finds
	// every run's, in any namespace.
	MarkerLabel = "conformance.gpulab.io/run-marker"
	// LockLabel marks the run lock, so cleanup finds it in any namespace.
	LockLabel = "conformance.gpulab.io/run-lock"
	// DefaultDuration is how long a lock or marker lives unrenewed: a run
	// killed outright holds the cluster this long, plus the skew allowance.
	DefaultDuration = time.Minute
	// DefaultWait is how long a run waits for the lock by default: longer
	// than a killed run's lock takes to expire, much shorter than a run.
	DefaultWait = 3 * time.Minute
)

// MarkerName is run runID's marker Lease.
func MarkerName(runID string) string { return cleanup.Name("gpulab-conformance-run", runID) }

// Options says which run Start records.
type Options struct {
	// Client talks to the cluster. Required.
	Client client.Client
	// Namespace holds the lock and the marker. Default DefaultNamespace.
	Namespace string
	// RunID is the run's. Required.
	RunID string
	// Duration is how long the lock and marker live unrenewed; they are
	// renewed every third of it. Default DefaultDuration.
	Duration time.Duration
	// Wait is how long to wait for a lock another run holds; 0 fails at
	// once.
	Wait time.Duration
	// AllowConcurrent skips the lock (the marker is still made): the run
	// may share the cluster, and its Warnings say so.
	AllowConcurrent bool
	// Interval is how often a waiting run tries the lock. Default a
	// quarter of Duration, at most 2 s.
	Interval time.Duration
	// Log receives a line when the run waits. Default: none.
	Log io.Writer
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Interval <= 0 {
		o.Interval = min(o.Duration/4, 2*time.Second)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// HeldError is a lock another run holds.
type HeldError struct {
	Namespace, Holder string
	RenewTime         time.Time
	Waited            time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("another run holds the cluster: run %s holds the run lock (Lease %s/%s, renewed %s), waited %s for it: "+
		"wait longer (--lock-wait), or share the cluster knowingly (--allow-concurrent)",
		e.Holder, e.Namespace, LockName, e.RenewTime.Format(time.RFC3339), e.Waited.Round(time.Second))
}

// InUseError is a run id whose marker exists.
type InUseError struct {
	Namespace, RunID string
	RenewTime        time.Time
	Expired          bool
}

func (e *InUseError) Error() string {
	if e.Expired {
		return fmt.Sprintf("run id %s was used by a run that stopped without ending (Lease %s/%s last renewed %s): "+
			"`gpulab-conformance cleanup --run-id %s` removes what it left; or choose another --run-id",
			e.RunID, e.Namespace, MarkerName(e.RunID), e.RenewTime.Format(time.RFC3339), e.RunID)
	}
	return fmt.Sprintf("run id %s is in use by a running run (Lease %s/%s, renewed %s): choose another --run-id",
		e.RunID, e.Namespace, MarkerName(e.RunID), e.RenewTime.Format(time.RFC3339))
}

// Run is a started run's marker, and its lock unless it allowed
// concurrent runs, both renewed until Release.
type Run struct {
	o      Options
	stop   context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	marker *coordinationv1.Lease
	lock   *coordinationv1.Lease // nil: not held (any more)
	warn   []string
}

// Start records the run (refused when its id is in use), takes the lock
// unless o.AllowConcurrent (waiting up to o.Wait), and renews both until
// Release. Renewal runs on its own: ctx ending does not stop it, so a run
// cut short keeps the cluster while it cleans up.
func Start(ctx context.Context, o Options) (*Run, error) {
	o = o.withDefaults()
	if o.Client == nil || o.RunID == "" {
		return nil, errors.New("runlock: a client and a run id are required")
	}
	r := &Run{o: o}
	marker := r.newLease(MarkerName(o.RunID), map[string]string{MarkerLabel: o.RunID}, time.Now())
	if err := o.Client.Create(ctx, marker); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("recording run %s (Lease %s/%s): %w", o.RunID, o.Namespace, marker.Name, err)
		}
		var old coordinationv1.Lease
		if err := o.Client.Get(ctx, client.ObjectKeyFromObject(marker), &old); err != nil {
			return nil, fmt.Errorf("run id %s is in use (Lease %s/%s): %w", o.RunID, o.Namespace, marker.Name, err)
		}
		return nil, &InUseError{Namespace: o.Namespace, RunID: o.RunID, RenewTime: renewTime(&old), Expired: Expired(&old, time.Now())}
	}
	r.marker = marker
	if o.AllowConcurrent {
		r.warn = append(r.warn, "--allow-concurrent: the run did not take the cluster's run lock, so other runs may have "+
			"shared the cluster: their gangs count in its free capacity and its measurements")
		var lock coordinationv1.Lease
		if err := o.Client.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: LockName}, &lock); err == nil &&
			holder(&lock) != "" && !Expired(&lock, time.Now()) {
			r.warn = append(r.warn, fmt.Sprintf("run %s held the cluster's run lock when this run started", holder(&lock)))
		}
	} else if err := r.acquire(ctx); err != nil {
		return nil, errors.Join(err, r.deleteMarker(context.WithoutCancel(ctx)))
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.done = stop, make(chan struct{})
	go r.renew(renewCtx)
	return r, nil
}

// Warnings are what the results should say about the run's hold on the
// cluster: --allow-concurrent, or a lock lost on the way.
func (r *Run) Warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warn...)
}

// Release stops renewing, then deletes the lock (only while it is still
// this run's: preconditions on its last write) and the marker.
func (r *Run) Release(ctx context.Context) error {
	r.stop()
	<-r.done
	r.mu.Lock()
	lock := r.lock
	r.lock = nil
	r.mu.Unlock()
	var errs []error
	if lock != nil {
		err := r.o.Client.Delete(ctx, lock, client.Preconditions{UID: &lock.UID, ResourceVersion: &lock.ResourceVersion})
		switch {
		case apierrors.IsConflict(err):
			r.warnf("the run lock changed hands before the run released it: another run may have overlapped its end")
		case err != nil && !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("releasing the run lock (Lease %s/%s): %w", r.o.Namespace, LockName, err))
		}
	}
	return errors.Join(append(errs, r.deleteMarker(ctx))...)
}

func (r *Run) deleteMarker(ctx context.Context) error {
	if r.marker == nil {
		return nil // deleted while the run lived (Warnings say so)
	}
	err := r.o.Client.Delete(ctx, r.marker, client.Preconditions{UID: &r.marker.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting run %s's marker (Lease %s/%s): %w", r.o.RunID, r.o.Namespace, r.marker.Name, err)
	}
	return nil
}

func (r *Run) warnf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warn = append(r.warn, fmt.Sprintf(format, args...))
}

func (r *Run) newLease(name string, labels map[string]string, now time.Time) *coordinationv1.Lease {
	labels["app.kubernetes.io/name"] = LockName
	seconds := int32(max(1, r.o.Duration/time.Second))
	t := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.o.Namespace, Name: name, Labels: labels},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &r.o.RunID, LeaseDurationSeconds: &seconds,
			AcquireTime: &t, RenewTime: &t, LeaseTransitions: new(int32)},
	}
}

// acquire takes the lock, waiting up to Wait while another run holds it.
func (r *Run) acquire(ctx context.Context) error {
	start := time.Now()
	seen := observer{}
	logged := ""
	for {
		held, err := r.tryLock(ctx, seen)
		if err != nil || held == nil {
			return err
		}
		waited := time.Since(start)
		if waited >= r.o.Wait {
			return &HeldError{Namespace: r.o.Namespace, Holder: holder(held), RenewTime: renewTime(held), Waited: waited}
		}
		if logged != holder(held) {
			logged = holder(held)
			fmt.Fprintf(r.o.Log, "run %s holds the cluster's run lock (Lease %s/%s): waiting up to %s (--lock-wait)\n",
				logged, r.o.Namespace, LockName, (r.o.Wait - waited).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for run %s to release the run lock: %w", holder(held), context.Cause(ctx))
		case <-time.After(min(r.o.Interval, r.o.Wait-waited)):
		}
	}
}

// tryLock takes the lock if it is free or expired. It returns the lease
// of the run holding it otherwise, nil when this run now does.
func (r *Run) tryLock(ctx context.Context, seen observer) (*coordinationv1.Lease, error) {
	c := r.o.Client
	now := time.Now()
	var cur coordinationv1.Lease
	err := c.Get(ctx, client.ObjectKey{Namespace: r.o.Namespace, Name: LockName}, &cur)
	if apierrors.IsNotFound(err) {
		lock := r.newLease(LockName, map[string]string{LockLabel: "true"}, now)
		switch err := c.Create(ctx, lock); {
		case apierrors.IsAlreadyExists(err):
			return r.tryLock(ctx, seen) // another run created it first: read who
		case err != nil:
			return nil, fmt.Errorf("taking the run lock (Lease %s/%s): %w", r.o.Namespace, LockName, err)
		}
		r.setLock(lock)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the run lock (Lease %s/%s): %w", r.o.Namespace, LockName, err)
	}
	if h := holder(&cur); h != "" && h != r.o.RunID && !seen.expired(&cur, now) {
		return &cur, nil
	}
	// Free, or its holder stopped renewing: take it over, only if nobody
	// wrote it since it was read (resourceVersion).
	t := metav1.NewMicroTime(now)
	seconds := int32(max(1, r.o.Duration/time.Second))
	transitions := ptrValue(cur.Spec.LeaseTransitions) + 1
	cur.Spec = coordinationv1.LeaseSpec{HolderIdentity: &r.o.RunID, LeaseDurationSeconds: &seconds,
		AcquireTime: &t, RenewTime: &t, LeaseTransitions: &transitions}
	switch err := c.Update(ctx, &cur); {
	case apierrors.IsConflict(err):
		return r.tryLock(ctx, seen)
	case err != nil:
		return nil, fmt.Errorf("taking over the run lock (Lease %s/%s): %w", r.o.Namespace, LockName, err)
	}
	r.setLock(&cur)
	return nil, nil
}

func (r *Run) setLock(l *coordinationv1.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lock = l
}

// renew renews the lock and the marker every third of Duration until
// ctx ends. A lock another run took, or one not renewed in time, becomes a
// warning: the runs may have overlapped.
func (r *Run) renew(ctx context.Context) {
	defer close(r.done)
	ticker := time.NewTicker(r.o.Duration / 3)
	defer ticker.Stop()
	lastLock, lastMarker := time.Now(), time.Now()
	lapsed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		now := time.Now()
		r.mu.Lock()
		lock := r.lock
		r.mu.Unlock()
		if lock != nil {
			switch err := r.renewLock(ctx, lock, now); {
			case err == nil:
				lastLock = now
			case errors.Is(err, errLost):
				r.warnf("%v at %s: runs may have overlapped", err, now.Format(time.RFC3339))
				r.setLock(nil)
			case !lapsed && now.Sub(lastLock) > r.o.Duration:
				lapsed = true
				r.warnf("the run lock went unrenewed for over %s (%v): another run may have taken the cluster meanwhile", r.o.Duration, err)
			}
		}
		if r.marker != nil {
			m := r.marker.DeepCopy()
			t := metav1.NewMicroTime(now)
			m.Spec.RenewTime = &t
			// Update, as the lock is renewed: the runner's role grants
			// update on Leases, not patch.
			switch err := r.o.Client.Update(ctx, m); {
			case err == nil:
				r.marker, lastMarker = m, now
			case apierrors.IsNotFound(err):
				r.warnf("run %s's marker was deleted while it ran (a cleanup of this run?)", r.o.RunID)
				r.marker = nil
			case now.Sub(lastMarker) > r.o.Duration:
				// Expired: a cleanup meanwhile may not have counted this run.
				r.warnf("run %s's marker went unrenewed for over %s: %v", r.o.RunID, r.o.Duration, err)
				lastMarker = now
			}
		}
	}
}

var errLost = errors.New("another run took the run lock")

func (r *Run) renewLock(ctx context.Context, lock *coordinationv1.Lease, now time.Time) error {
	l := lock.DeepCopy()
	t := metav1.NewMicroTime(now)
	l.Spec.RenewTime = &t
	err := r.o.Client.Update(ctx, l)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		var cur coordinationv1.Lease
		if err := r.o.Client.Get(ctx, client.ObjectKeyFromObject(l), &cur); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w (it was deleted)", errLost)
			}
			return err
		}
		if holder(&cur) != r.o.RunID {
			return fmt.Errorf("%w: run %s holds it", errLost, holder(&cur))
		}
		cur.Spec.RenewTime = &t
		l, err = &cur, r.o.Client.Update(ctx, &cur)
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	if r.lock != nil {
		r.lock = l
	}
	r.mu.Unlock()
	return nil
}

// Expired says whether l's holder stopped renewing it, by the clocks: its
// renew time plus its duration, plus as much again for clock skew between
// the holder and the reader, is past.
func Expired(l *coordinationv1.Lease, now time.Time) bool {
	return now.After(renewTime(l).Add(2 * duration(l)))
}

// observer tells an expired lock by what this process saw: the same
// holder and renew time for a whole duration, whatever the clocks say
// (as client-go's leader election does), or Expired.
type observer map[string]time.Time

func (o observer) expired(l *coordinationv1.Lease, now time.Time) bool {
	key := holder(l) + "@" + renewTime(l).String() + "#" + l.ResourceVersion
	first, ok := o[key]
	if !ok {
		o[key], first = now, now
	}
	return now.Sub(first) >= duration(l) || Expired(l, now)
}

func holder(l *coordinationv1.Lease) string { return ptrValue(l.Spec.HolderIdentity) }

func renewTime(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime != nil {
		return l.Spec.RenewTime.Time
	}
	return l.CreationTimestamp.Time
}

func duration(l *coordinationv1.Lease) time.Duration {
	if s := ptrValue(l.Spec.LeaseDurationSeconds); s > 0 {
		return time.Duration(s) * time.Second
	}
	return DefaultDuration
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
