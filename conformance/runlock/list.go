package runlock

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Entry is a run's marker or the run lock, as cleanup sees it.
type Entry struct {
	Namespace, Name string
	// RunID is the marker's run, or the lock's holder.
	RunID string
	// Lock: the run lock, not a marker.
	Lock      bool
	RenewTime time.Time
	// Expired: its run stopped renewing it (Expired), so it was killed.
	Expired bool
	// resourceVersion is what List read: Delete deletes only that.
	resourceVersion string
}

func (e Entry) String() string {
	what := "run " + e.RunID + "'s marker"
	if e.Lock {
		what = "the run lock, held by run " + e.RunID
	}
	state := "renewed " + e.RenewTime.Format(time.RFC3339)
	if e.Expired {
		state = "expired, last renewed " + e.RenewTime.Format(time.RFC3339)
	}
	return fmt.Sprintf("Lease %s/%s (%s, %s)", e.Namespace, e.Name, what, state)
}

// List finds every run's marker and every run lock, in every namespace (a
// run may have used --lock-namespace).
func List(ctx context.Context, c client.Client, now time.Time) ([]Entry, error) {
	var out []Entry
	for _, label := range []string{MarkerLabel, LockLabel} {
		var leases coordinationv1.LeaseList
		if err := c.List(ctx, &leases, client.HasLabels{label}); err != nil {
			return nil, fmt.Errorf("listing the runs' Leases (%s): %w", label, err)
		}
		for i := range leases.Items {
			l := &leases.Items[i]
			if l.DeletionTimestamp != nil {
				continue
			}
			e := Entry{Namespace: l.Namespace, Name: l.Name, RunID: l.Labels[MarkerLabel], Lock: label == LockLabel,
				RenewTime: renewTime(l), Expired: Expired(l, now), resourceVersion: l.ResourceVersion}
			if e.Lock {
				e.RunID = holder(l)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Delete deletes e as List read it: a lock another run took since is left.
func Delete(ctx context.Context, c client.Client, e Entry) error {
	l := &coordinationv1.Lease{}
	l.Namespace, l.Name = e.Namespace, e.Name
	err := c.Delete(ctx, l, client.Preconditions{ResourceVersion: &e.resourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s: %w", e, err)
	}
	return nil
}
