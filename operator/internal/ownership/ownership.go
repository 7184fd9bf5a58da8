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
)

// ConflictError says a wanted name is taken by an object this owner does not
// control. Its message names the object and who controls it.
type ConflictError struct {
	// Kind and Name identify the object that holds the name.
	Kind, Name string
	// Controller describes the object's controller ("no controller" when it
	// has none), e.g. "GPUCluster a".
	Controller string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %s already exists and is controlled by %s, not by this object: it is left untouched; rename or delete it",
		e.Kind, e.Name, e.Controller)
}

// IsConflict says whether err (possibly wrapped or joined) holds a ConflictError.
func IsConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
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
	if ref != nil {
		controller = ref.Kind + " " + ref.Name
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group != "" {
			controller = ref.Kind + "." + gv.Group + " " + ref.Name
		}
	}
	return &ConflictError{Kind: kind, Name: obj.GetName(), Controller: controller}
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
