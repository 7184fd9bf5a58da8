package bare

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Create makes a gang's children in gpulab's operator's order: the head
// Service, the claim templates, the PodGroup (so no pod can be bound
// outside its gang), then the pods, at most podParallelism at a time. It
// stops at a failed Service, claim template or PodGroup, and otherwise
// reports every failure.
func Create(ctx context.Context, c client.Client, ch *Children) error {
	if err := c.Create(ctx, ch.Service); err != nil {
		return fmt.Errorf("creating Service %s: %w", ch.Service.Name, err)
	}
	for _, t := range ch.ClaimTemplates {
		if err := c.Create(ctx, t); err != nil {
			return fmt.Errorf("creating ResourceClaimTemplate %s: %w", t.Name, err)
		}
	}
	if err := c.Create(ctx, ch.PodGroup); err != nil {
		return fmt.Errorf("creating PodGroup %s: %w", ch.PodGroup.Name, err)
	}
	errs := make([]error, len(ch.Pods))
	sem := make(chan struct{}, podParallelism)
	var wg sync.WaitGroup
	for i, p := range ch.Pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.Create(ctx, p); err != nil {
				errs[i] = fmt.Errorf("creating pod %s: %w", p.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// podParallelism is the pod creates of one gang in flight at once, as in
// gpulab's operator (operator/internal/controller/gpucluster).
const podParallelism = 8

// CreateAll creates the children of every gang at once, from their
// created ConfigMaps, as an operator reacting to a burst of gangs does
// with the client's limits as the only bound.
func CreateAll(ctx context.Context, c client.Client, gangs []*corev1.ConfigMap) error {
	errs := make([]error, len(gangs))
	var wg sync.WaitGroup
	for i, cm := range gangs {
		wg.Go(func() {
			ch, err := ChildrenOf(cm)
			if err == nil {
				err = Create(ctx, c, ch)
			}
			if err != nil {
				errs[i] = fmt.Errorf("gang %s: %w", cm.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
