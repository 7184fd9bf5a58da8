package runner

import (
	"context"
	"errors"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cleanup deletes the run's Job (and its pod) and results ConfigMap, and,
// once no other run's Job is left in the namespace, the shared objects
// Submit created (never ones it found). It returns what it deleted.
func Cleanup(ctx context.Context, c client.Client, namespace, runID string) ([]string, error) {
	var deleted []string
	var errs []error
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, obj := range []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: JobName(runID)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ConfigMapName(runID)}},
	} {
		switch err := c.Delete(ctx, obj, background); {
		case err == nil:
			deleted = append(deleted, kindName(obj))
		case !apierrors.IsNotFound(err):
			errs = append(errs, err)
		}
	}
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.InNamespace(namespace), client.HasLabels{RunnerLabel}); err != nil && !apierrors.IsNotFound(err) {
		return deleted, errors.Join(append(errs, err)...)
	}
	others := 0
	for _, j := range jobs.Items {
		if j.Labels[RunnerLabel] != runID && j.DeletionTimestamp == nil {
			others++
		}
	}
	if others > 0 {
		return deleted, errors.Join(errs...)
	}
	shared, err := CleanupShared(ctx, c, namespace)
	return append(deleted, shared...), errors.Join(append(errs, err)...)
}

// CleanupShared deletes the shared objects Submit created in namespace
// (those carrying ManagedBy; never ones it found there). Callers make sure
// no run still uses them.
func CleanupShared(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	var deleted []string
	var errs []error
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	shared := Shared(namespace)
	for i := len(shared) - 1; i >= 0; i-- {
		obj := shared[i]
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		if obj.GetLabels()[ManagedByLabel] != ManagedBy {
			continue // someone else's: a reviewed install stays
		}
		if err := c.Delete(ctx, obj, background); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, kindName(obj))
	}
	return deleted, errors.Join(errs...)
}
