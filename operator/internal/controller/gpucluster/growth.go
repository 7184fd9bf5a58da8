package gpucluster

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/operator/internal/capacity"
)

// judgeGrowth replaces the verdict of a gang that does not fit today's
// nodes when the cluster can grow for it (spec.scheduling.capacity):
// Autoscaled always waits for nodes; Auto waits when a Karpenter NodePool
// has room for what the gang lacks and says no NodePool can host it
// otherwise; Fixed, or Auto with no NodePools served, keeps the verdict.
func (r *Reconciler) judgeGrowth(ctx context.Context, s *scope, fleet []capacity.Node) error {
	mode := s.cluster.Spec.Scheduling.Capacity
	if mode == gpulabv1alpha1.CapacityFixed || (mode != gpulabv1alpha1.CapacityAutoscaled && !r.opts.NodePoolsServed) {
		return nil
	}
	var pools []capacity.Pool
	if r.opts.NodePoolsServed {
		// From the cache the NodePool watch fills: every NodePool change
		// wakes the clusters that do not fit, and each reads them here.
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(karpenter.NodePoolKind.GroupVersion().WithKind("NodePoolList"))
		if err := r.client.List(ctx, list); err != nil {
			return fmt.Errorf("listing Karpenter NodePools: %w", err)
		}
		pools = capacity.NodePools(list.Items)
	}
	s.desired.verdict = capacity.Grow(fleet, pools, s.desired.demands, mode == gpulabv1alpha1.CapacityAutoscaled)
	return nil
}
