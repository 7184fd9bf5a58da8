// Package cachesync lets a reconcile read its own writes: after a write it
// waits, briefly, until the informer cache holds the object as written.
// Without it the next reconcile (often already queued by a child's event)
// starts from the stale copy and its status write conflicts.
package cachesync

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Timeout bounds the wait: past it the next reconcile may see a stale copy
// and is corrected by optimistic concurrency.
const Timeout = 2 * time.Second

// Await polls the cache until it holds written's resourceVersion, or a newer
// generation (someone changed the spec since), or Timeout passes.
func Await(ctx context.Context, cache client.Reader, written client.Object) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cached := written.DeepCopyObject().(client.Object)
		if err := cache.Get(ctx, client.ObjectKeyFromObject(written), cached); err != nil {
			return false, nil
		}
		return cached.GetResourceVersion() == written.GetResourceVersion() || cached.GetGeneration() != written.GetGeneration(), nil
	})
}
