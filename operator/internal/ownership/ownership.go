// Package ownership decides whether a child object found under a name the
// operator wants belongs to the object reconciling it. The operator never
// adopts, updates or deletes an object whose controller is someone else.
package ownership

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// ConflictError says a wanted name is taken by an object this owner does not
// control. Its message names the object and who controls it.
type ConflictError struct {
	// Kind and Name identify the object that holds the name.
	Kind, Name string
	// Controller describes the object's controller ("no controller" when it
	// has none), e.g. "GPUCluster a".
	Controller string
	// Previous says the controller is a deleted object of the owner's kind
	// and name (the owner's previous incarnation): the garbage collector
	// removes the object, so the owner waits rather than reports a conflict.
	Previous bool
}

func (e *ConflictError) Error() string {
	if e.Previous {
		return fmt.Sprintf("%s %s is still controlled by the previous %s (deleted): waiting for the garbage collector to remove it",
			e.Kind, e.Name, e.Controller)
	}
	return fmt.Sprintf("%s %s already exists and is controlled by %s, not by this object: it is left untouched; rename or delete it",
		e.Kind, e.Name, e.Controller)
}

// IsConflict says whether err (possibly wrapped or joined) holds a ConflictError.
func IsConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}

// IsReplacing says whether err holds only ConflictErrors with a previous
// owner: names the garbage collector will free, so waiting is enough.
func IsReplacing(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if !IsReplacing(e) {
				return false
			}
		}
		return len(joined.Unwrap()) > 0
	}
	var c *ConflictError
	return errors.As(err, &c) && c.Previous
}

// Check returns nil when owner controls obj (same UID), and a *ConflictError
// otherwise. kind names obj's kind in the message (typed objects read from a
// client carry no TypeMeta).
func Check(kind string, obj client.Object, owner metav1.Object) error {
	ref := metav1.GetControllerOf(obj)
	if ref != nil && ref.UID == owner.GetUID() {
		return nil
	}
	controller := "no controller"
	previous := false
	if ref != nil {
		controller = ref.Kind + " " + ref.Name
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group != "" {
			controller = ref.Kind + "." + gv.Group + " " + ref.Name
		}
		// Names are unique per kind and namespace: a controller of the
		// owner's kind and name with another UID has been deleted.
		if own, ok := kindOf(owner); ok && err == nil {
			previous = ref.Name == owner.GetName() && ref.Kind == own.Kind && gv.Group == own.Group
		}
	}
	return &ConflictError{Kind: kind, Name: obj.GetName(), Controller: controller, Previous: previous}
}

// kindOf is the kind of an owner gpulab reconciles (typed objects read
// from a client carry no TypeMeta).
func kindOf(owner metav1.Object) (schema.GroupVersionKind, bool) {
	switch owner.(type) {
	case *gpulabv1alpha1.GPUCluster:
		return gpulabv1alpha1.GroupVersion.WithKind("GPUCluster"), true
	case *gpulabv1alpha1.GPUJob:
		return gpulabv1alpha1.GroupVersion.WithKind("GPUJob"), true
	}
	return schema.GroupVersionKind{}, false
}

// CheckExisting reads, from reader (the API server, not a cache that may
// hold only labelled objects), an object whose create found its name taken,
// and returns a *ConflictError unless owner controls it. An object gone since
// the create is an ordinary error: the next reconcile creates it.
func CheckExisting(ctx context.Context, reader client.Reader, kind string, obj client.Object, key client.ObjectKey, owner metav1.Object) error {
	if err := reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s was deleted while being created; retrying", kind, key.Name)
		}
		return fmt.Errorf("reading %s %s: %w", kind, key.Name, err)
	}
	return Check(kind, obj, owner)
}
