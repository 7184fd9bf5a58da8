package gpucluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/gpulab/gpulab/operator/internal/ownership"
)

// reconcileService creates the head Service, or updates its ports and
// selector when the head template changed.
func (r *Reconciler) reconcileService(ctx context.Context, s *scope) error {
	want := s.desired.service
	got := &corev1.Service{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(want), got)
	switch {
	case apierrors.IsNotFound(err):
		svc := want.DeepCopy()
		if err := controllerutil.SetControllerReference(s.cluster, svc, r.scheme); err != nil {
			return err
		}
		err := r.client.Create(ctx, svc)
		if apierrors.IsAlreadyExists(err) {
			// The cache holds only labelled Services: the one there may be
			// ours, not seen yet, or anyone's.
			return ownership.CheckExisting(ctx, r.apiReader, "Service", &corev1.Service{}, client.ObjectKeyFromObject(svc), s.cluster)
		}
		if err != nil {
			return fmt.Errorf("creating Service %s: %w", svc.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading Service %s: %w", want.Name, err)
	}
	if err := ownership.Check("Service", got, s.cluster); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(got.Spec.Selector, want.Spec.Selector) && portsEqual(got.Spec.Ports, want.Spec.Ports) {
		return nil
	}
	got.Spec.Selector = want.Spec.Selector
	got.Spec.Ports = want.Spec.Ports
	if err := r.client.Update(ctx, got); err != nil {
		return fmt.Errorf("updating Service %s: %w", want.Name, err)
	}
	return nil
}

// portsEqual compares the fields we set; the API server fills in the rest.
func portsEqual(a, b []corev1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Port != b[i].Port {
			return false
		}
	}
	return true
}
