package gpucluster

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gpulab/gpulab/operator/internal/ownership"
)

// reconcileClaimTemplates creates the ResourceClaimTemplate of every group
// whose GPUs come through DRA before any of its pods, and replaces one
// whose request changed (a template's spec cannot be updated; claims made
// from the old one stay with their pods). Templates are read uncached:
// only DRA clusters have them, and a cluster without DRA then needs no
// informer for an API it may not serve.
func (r *Reconciler) reconcileClaimTemplates(ctx context.Context, s *scope) error {
	for _, want := range s.desired.claimTemplates {
		got := &resourceapi.ResourceClaimTemplate{}
		err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(want), got)
		switch {
		case apierrors.IsNotFound(err):
			tmpl := want.DeepCopy()
			if err := controllerutil.SetControllerReference(s.cluster, tmpl, r.scheme); err != nil {
				return err
			}
			if err := r.client.Create(ctx, tmpl); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating ResourceClaimTemplate %s: %w", tmpl.Name, err)
			}
			continue
		case meta.IsNoMatchError(err):
			return fmt.Errorf("gpus.deviceClassName needs Dynamic Resource Allocation (resource.k8s.io/v1), which the cluster does not serve: %w", err)
		case err != nil:
			return fmt.Errorf("reading ResourceClaimTemplate %s: %w", want.Name, err)
		}
		if err := ownership.Check("ResourceClaimTemplate", got, s.cluster); err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(got.Spec, want.Spec) {
			continue
		}
		if err := r.client.Delete(ctx, got, client.Preconditions{UID: &got.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing ResourceClaimTemplate %s: %w", want.Name, err)
		}
		return fmt.Errorf("ResourceClaimTemplate %s changed: replaced; retrying", want.Name)
	}
	return nil
}
