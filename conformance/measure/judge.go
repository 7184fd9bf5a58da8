package measure

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpulab/gpulab/internal/poll"
)

// The invariants judged from the timelines: partial binding, duplicate
// pods, pods without their PodGroup, Ready claims the cluster disagrees with.

// Violations returns the broken invariants seen so far whose evidence is
// complete: duplicate pods; gangs that are, or were, partly bound for
// longer than the grace; pods created before their PodGroup, after it was
// deleted, or with none ever appearing; statuses that claimed Ready before
// every pod was seen Ready.
func (r *Recorder) Violations() []Violation {
	v, _ := r.judge(time.Now())
	return v
}

// Pending describes the suspicions not yet decided either way: a partial
// binding still within its grace, or a verdict waiting on a watch that may
// lag. Settle waits for them.
func (r *Recorder) Pending() []string {
	_, p := r.judge(time.Now())
	return p
}

// Settle waits until nothing is pending, so Violations is the whole verdict.
func (r *Recorder) Settle(ctx context.Context, timeout time.Duration) error {
	return poll.Until(ctx, timeout, func() (bool, string) {
		p := r.Pending()
		return len(p) == 0, strings.Join(p, "; ")
	})
}

func (r *Recorder) judge(now time.Time) (out []Violation, pending []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out = append(out, r.violations...)
	names := make([]string, 0, len(r.clusters))
	for name := range r.clusters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := r.clusters[name]
		evidence := t.placedPartly
		if evidence == "" && !t.partial.IsZero() {
			if stalled := r.stalled(t, now); stalled != "" {
				evidence = stalled
			} else {
				pending = append(pending, fmt.Sprintf("gang %s partly bound for %s, binds in flight", name, now.Sub(t.partial).Round(time.Millisecond)))
			}
		}
		if evidence != "" {
			out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("gang %s was partly bound: %s", name, evidence)})
		}
		v, p := r.judgePodGroups(name, t, now)
		out, pending = append(out, v...), append(pending, p...)
		v, p = r.judgeReadyClaim(name, t, now)
		out, pending = append(out, v...), append(pending, p...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, pending
}

type podGroupVerdict int

const (
	covered podGroupVerdict = iota
	undecidable
	beforePodGroup
	afterPodGroupDeleted
	noPodGroup
)

// coverage says whether a PodGroup existed at revision rv and, if not,
// the revisions around the gap.
func coverage(lives []podGroupLife, rv int64) (v podGroupVerdict, deletedAt, createdAt int64) {
	for i, l := range lives {
		if rv < l.created {
			if i == 0 {
				return beforePodGroup, 0, l.created
			}
			if lives[i-1].deletedUnknown {
				return undecidable, 0, 0
			}
			return afterPodGroupDeleted, lives[i-1].deleted, l.created
		}
		if l.deleted == 0 || rv < l.deleted {
			return covered, 0, 0
		}
	}
	if len(lives) == 0 {
		return noPodGroup, 0, 0
	}
	if last := lives[len(lives)-1]; !last.deletedUnknown {
		return afterPodGroupDeleted, last.deleted, 0
	}
	return undecidable, 0, 0
}

// judgePodGroups checks that a PodGroup existed when each of the cluster's
// gang pods was created: a pod without its PodGroup can be bound on its own.
func (r *Recorder) judgePodGroups(name string, t *Timeline, now time.Time) (out []Violation, pending []string) {
	type offence struct {
		pod                    podCreation
		deletedAt, recreatedAt int64
		n                      int
	}
	first := map[podGroupVerdict]*offence{}
	for _, pc := range t.created {
		if !pc.grouped || (t.deletedRV > 0 && pc.rv > t.deletedRV) {
			// Not a gang member, or created after its cluster was deleted:
			// garbage the collector removes with it.
			continue
		}
		v, deletedAt, createdAt := coverage(t.podGroups, pc.rv)
		if v == covered || v == undecidable {
			continue
		}
		// Final once the PodGroup and GPUCluster watches have passed the
		// pod's revision; until then a lagging event may still cover it.
		if (r.podGroupRV <= pc.rv || r.clusterRV <= pc.rv) && now.Sub(pc.seen) <= r.in.PartialGrace {
			pending = append(pending, fmt.Sprintf("pod %s: waiting for the PodGroup watch to pass revision %d", pc.name, pc.rv))
			continue
		}
		o := first[v]
		if o == nil {
			o = &offence{}
			first[v] = o
		}
		o.n++
		if o.n == 1 || pc.rv < o.pod.rv {
			o.pod, o.deletedAt, o.recreatedAt = pc, deletedAt, createdAt
		}
	}
	more := func(o *offence) string {
		if o.n > 1 {
			return fmt.Sprintf(" (and %d more pods)", o.n-1)
		}
		return ""
	}
	if o := first[beforePodGroup]; o != nil {
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("pod %s was created (revision %d) before its PodGroup (revision %d)%s: the scheduler may bind part of the gang",
			o.pod.name, o.pod.rv, o.recreatedAt, more(o))})
	}
	if o := first[afterPodGroupDeleted]; o != nil {
		recreated := "and was not recreated"
		if o.recreatedAt > 0 {
			recreated = fmt.Sprintf("and recreated at revision %d", o.recreatedAt)
		}
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("pod %s was created (revision %d) after its PodGroup was deleted (revision %d) %s%s: the scheduler may bind part of the gang",
			o.pod.name, o.pod.rv, o.deletedAt, recreated, more(o))})
	}
	if o := first[noPodGroup]; o != nil {
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("pod %s was created (revision %d) and its PodGroup never appeared%s: the scheduler cannot gang-schedule it",
			o.pod.name, o.pod.rv, more(o))})
	}
	return out, pending
}

// judgeReadyClaim checks that the status first claimed Ready (phase Ready
// or Ready=True) after the suite saw every desired pod Ready.
func (r *Recorder) judgeReadyClaim(name string, t *Timeline, now time.Time) (out []Violation, pending []string) {
	switch {
	case t.claimRV == 0 || t.Desired == 0 || (t.allReadyRV > 0 && t.allReadyRV < t.claimRV):
	case t.allReadyRV > t.claimRV:
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("%s %s status claimed Ready (revision %d) before every pod was Ready (revision %d)",
			r.in.Workload.Kind(), name, t.claimRV, t.allReadyRV)})
	case r.podRV > t.claimRV || now.Sub(t.claimAt) > r.in.PartialGrace:
		out = append(out, Violation{Cluster: name, At: now, What: fmt.Sprintf("%s %s status claimed Ready (revision %d) while the suite had seen only %d of %d pods Ready",
			r.in.Workload.Kind(), name, t.claimRV, t.ready, t.Desired)})
	default:
		pending = append(pending, fmt.Sprintf("%s %s claims Ready: waiting for the pod watch to pass revision %d", r.in.Workload.Kind(), name, t.claimRV))
	}
	return out, pending
}
