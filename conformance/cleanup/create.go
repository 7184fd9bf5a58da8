package cleanup

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateAll creates objs with at most parallel creates in flight and
// returns every object that was created, in objs' order, even when others
// failed: a caller that records them only up to the first failure leaves
// the later ones, and their pods, holding GPUs until the final cleanup.
// before, when not nil, runs just before each create (a clock to start);
// after, when not nil, right after each successful one, in the same slot
// of the parallelism (an operator's reaction to it), its error joined to
// the result.
func CreateAll(ctx context.Context, c client.Client, objs []client.Object, parallel int, before func(i int), after func(i int) error) ([]client.Object, error) {
	errs, afterErrs := make([]error, len(objs)), make([]error, len(objs))
	sem := make(chan struct{}, max(1, parallel))
	var wg sync.WaitGroup
	for i := range objs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if before != nil {
				before(i)
			}
			if err := c.Create(ctx, objs[i]); err != nil {
				errs[i] = fmt.Errorf("creating %s: %w", objs[i].GetName(), err)
			} else if after != nil {
				afterErrs[i] = after(i)
			}
		}()
	}
	wg.Wait()
	var created []client.Object
	for i, obj := range objs {
		if errs[i] == nil {
			created = append(created, obj)
		}
	}
	return created, errors.Join(append(errs, afterErrs...)...)
}
