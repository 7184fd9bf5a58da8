package gpucluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/cachesync"
)

// PodTurned is the pod update classifier of a reconciler that reads
// through a cache of cfg's API server with the operator's pod index,
// running until ctx ends, and that cache.
func PodTurned(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (func(context.Context, event.UpdateEvent) bool, client.Reader, error) {
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		return nil, nil, err
	}
	writes := cachesync.NewClient(c)
	if err := writes.LabelIndex(ctx, informers, &corev1.Pod{}, podClusterIndex, gpulabv1alpha1.ClusterLabel); err != nil {
		return nil, nil, err
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return nil, nil, fmt.Errorf("the cache did not sync")
	}
	return (&Reconciler{client: writes}).podTurned, informers, nil
}
