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
//
// before, when not nil, runs in the create's slot just before the create
// is issued: a gang's clock starts there, so the wait for a free slot is
// outside it, alike for every workload. after, when not nil, runs once
// each create has succeeded, on a goroutine of its own that holds no slot
// (an operator's reaction to the object, which must not keep the next
// create waiting); CreateAll waits for every after and joins its error to
// the result.
func CreateAll(ctx context.Context, c client.Client, objs []client.Object, parallel int, before func(i int), after func(i int) error) ([]client.Object, error) {
	errs, afterErrs := make([]error, len(objs)), make([]error, len(objs))
	sem := make(chan struct{}, max(1, parallel))
	var creates, reactions sync.WaitGroup
	for i := range objs {
		sem <- struct{}{}
		creates.Go(func() {
			defer func() { <-sem }()
			if before != nil {
				before(i)
			}
			if err := c.Create(ctx, objs[i]); err != nil {
				errs[i] = fmt.Errorf("creating %s: %w", objs[i].GetName(), err)
				return
			}
			if after != nil {
				reactions.Go(func() { afterErrs[i] = after(i) })
			}
		})
	}
	creates.Wait()
	reactions.Wait()
	var created []client.Object
	for i, obj := range objs {
		if errs[i] == nil {
			created = append(created, obj)
		}
	}
	return created, errors.Join(append(errs, afterErrs...)...)
}
