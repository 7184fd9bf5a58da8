// Package runlock keeps runs of the suite from sharing a cluster unasked,
// and records every run, so that cleanup can tell whether anything still
// uses the shared objects (the runner's RBAC and namespace).
//
// Each run creates a marker: a coordination.k8s.io Lease named for its run
// id (MarkerName), labelled MarkerLabel=run id, renewed while the run lives
// and deleted at its end. A second run with the same id finds it and is
// refused, so two runs never delete each other's objects.
//
// Unless told --allow-concurrent, a run also takes the cluster's run lock:
// one Lease named for the suite (LockName), holder = the run id, renewed
// every third of its duration. A second run waits for it (--lock-wait) or
// fails naming the holder's run id; a lock whose holder stopped renewing
// (a killed run) is taken once it has expired.
//
// Both live in one namespace, DefaultNamespace ("default") unless
// --lock-namespace says otherwise, and every run on a cluster must use the
// same one: every cluster has "default" (the API server keeps it), so a
// run from a laptop needs no namespace of its own made first, which the
// runner namespace is not; and unlike kube-system, no control-plane leader
// election Lease lives there for a guest allowed to write Leases to take.
package runlock
