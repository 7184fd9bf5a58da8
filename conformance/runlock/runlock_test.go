package runlock_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/runlock"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// lockedBuffer is a Log two goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunLock runs on one API server; each case in its own namespace.
func TestRunLock(t *testing.T) {
	// A real API server; no CRDs but gpulab's are needed.
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	env := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{filepath.Join(root, "operator", "config", "crd", "bases")}})
	c := env.Client
	ctx := context.Background()
	namespace := func(t *testing.T, name string) string {
		t.Helper()
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	holderOf := func(t *testing.T, ns string) string {
		t.Helper()
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: runlock.LockName}, &l); err != nil {
			t.Fatal(err)
		}
		return *l.Spec.HolderIdentity
	}
	const d = 2 * time.Second

	t.Run("two runs at once: one holds, the other fails naming it, then waits for it", func(t *testing.T) {
		ns := namespace(t, "two-at-once")
		var runs [2]*runlock.Run
		var errs [2]error
		var wg sync.WaitGroup
		for i, id := range []string{"a-1", "b-1"} {
			wg.Go(func() {
				runs[i], errs[i] = runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: id, Duration: d})
			})
		}
		wg.Wait()
		winner, loser := 0, 1
		if errs[0] != nil {
			winner, loser = 1, 0
		}
		ids := []string{"a-1", "b-1"}
		var held *runlock.HeldError
		if errs[winner] != nil || !errors.As(errs[loser], &held) || held.Holder != ids[winner] ||
			!strings.Contains(errs[loser].Error(), "run "+ids[winner]+" holds the run lock") {
			t.Fatalf("started at once: errors %v; want one run to hold the lock and the other refused naming it", errs)
		}
		if got := holderOf(t, ns); got != ids[winner] {
			t.Errorf("lock held by %q, want %s", got, ids[winner])
		}
		// Waiting longer than the lock's duration: the holder renews, so
		// the waiter still fails.
		_, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: "c-1", Duration: d, Wait: 2*d + d/2})
		if !errors.As(err, &held) || held.Holder != ids[winner] {
			t.Errorf("a run waiting %s while %s renews: %v, want the lock held by %s", 2*d+d/2, ids[winner], err, ids[winner])
		}
		// A run waiting takes the lock once the holder releases it.
		log := &lockedBuffer{}
		type result struct {
			run *runlock.Run
			err error
		}
		got := make(chan result, 1)
		go func() {
			r, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: ids[loser], Duration: d, Wait: time.Minute, Log: log})
			got <- result{r, err}
		}()
		if err := poll.Until(ctx, 30*time.Second, func() (bool, string) {
			return strings.Contains(log.String(), "run "+ids[winner]+" holds the cluster's run lock"), log.String()
		}); err != nil {
			t.Fatalf("the second run does not say it waits: %v", err)
		}
		if err := runs[winner].Release(ctx); err != nil {
			t.Fatal(err)
		}
		res := <-got
		if res.err != nil {
			t.Fatalf("the waiting run: %v", res.err)
		}
		if h := holderOf(t, ns); h != ids[loser] {
			t.Errorf("lock held by %q after the release, want %s", h, ids[loser])
		}
		if err := res.run.Release(ctx); err != nil {
			t.Fatal(err)
		}
		left, err := runlock.List(ctx, c, time.Now())
		for _, e := range left {
			if e.Namespace == ns {
				t.Errorf("left after both released: %s", e)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a lock whose holder stopped renewing is taken after it expires", func(t *testing.T) {
		ns := namespace(t, "expired")
		dead, seconds, now := "killed-1", int32(1), metav1.NewMicroTime(time.Now())
		if err := c.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runlock.LockName, Labels: map[string]string{runlock.LockLabel: "true"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &dead, LeaseDurationSeconds: &seconds, RenewTime: &now, AcquireTime: &now},
		}); err != nil {
			t.Fatal(err)
		}
		r, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: "next-1", Duration: d, Wait: 30 * time.Second})
		if err != nil {
			t.Fatalf("the lock of a run that stopped renewing was not taken: %v", err)
		}
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: runlock.LockName}, &l); err != nil {
			t.Fatal(err)
		}
		if *l.Spec.HolderIdentity != "next-1" || l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 1 {
			t.Errorf("lock %+v, want held by next-1 after one transition", l.Spec)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a run id in use is refused", func(t *testing.T) {
		ns := namespace(t, "in-use")
		first, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: "same", Duration: d, AllowConcurrent: true})
		if err != nil {
			t.Fatal(err)
		}
		var inUse *runlock.InUseError
		_, err = runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: "same", Duration: d, AllowConcurrent: true})
		if !errors.As(err, &inUse) || inUse.Expired || !strings.Contains(err.Error(), "choose another --run-id") {
			t.Errorf("a second run with id same: %v, want it refused as in use", err)
		}
		// --allow-concurrent skips the lock but says so, and who held it.
		other, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: "holder", Duration: d})
		if err != nil {
			t.Fatal(err)
		}
		shared, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: "beside", Duration: d, AllowConcurrent: true})
		if err != nil {
			t.Fatalf("--allow-concurrent beside a held lock: %v", err)
		}
		if w := strings.Join(shared.Warnings(), "\n"); !strings.Contains(w, "--allow-concurrent") || !strings.Contains(w, "run holder held") {
			t.Errorf("warnings %q do not say the run shared the cluster with run holder", w)
		}
		for _, r := range []*runlock.Run{first, other, shared} {
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		again, err := runlock.Start(ctx, runlock.Options{Client: c, Namespace: ns, RunID: "same", Duration: d})
		if err != nil {
			t.Fatalf("run id same after its run ended: %v", err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: runlock.MarkerName("holder")}, &l); !apierrors.IsNotFound(err) {
			t.Errorf("run holder's marker after Release: %v, want it deleted", err)
		}
	})
}
