package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
)

// Submit creates the shared objects that are not there yet (an existing
// one is left as it is, whoever made it) and the run's Job, which must
// not exist. It returns the shared objects it created.
func Submit(ctx context.Context, c client.Client, o Options) ([]string, error) {
	o = o.withDefaults()
	if o.Image == "" || o.RunID == "" {
		return nil, errors.New("submit: an image and a run id are required")
	}
	var created []string
	for _, obj := range Shared(o.Namespace) {
		err := c.Create(ctx, obj)
		switch {
		case apierrors.IsAlreadyExists(err):
			if err := bindsRunner(ctx, c, obj, o.Namespace); err != nil {
				return created, err
			}
		case err != nil:
			return created, fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		default:
			created = append(created, kindName(obj))
		}
	}
	if err := c.Create(ctx, Job(o)); err != nil {
		return created, fmt.Errorf("creating the runner Job %s/%s: %w", o.Namespace, JobName(o.RunID), err)
	}
	return created, nil
}

// bindsRunner checks that an existing ClusterRoleBinding of the runner's
// name binds the runner's ServiceAccount: one made for another namespace
// (the chart's runner binds its release's) would leave this one unbound,
// and the run would fail at preflight. Other objects are used as found.
func bindsRunner(ctx context.Context, c client.Client, obj client.Object, namespace string) error {
	if _, ok := obj.(*rbacv1.ClusterRoleBinding); !ok {
		return nil
	}
	var crb rbacv1.ClusterRoleBinding
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &crb); err != nil {
		return err
	}
	var bound []string
	for _, s := range crb.Subjects {
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == rbac.Name && s.Namespace == namespace {
			return nil
		}
		bound = append(bound, s.Kind+" "+s.Namespace+"/"+s.Name)
	}
	return fmt.Errorf("ClusterRoleBinding %s already exists and binds %v, not ServiceAccount %s/%s: "+
		"give --runner-namespace the namespace it binds (the chart's runner: its release namespace)", crb.Name, bound, namespace, rbac.Name)
}

func kindName(obj client.Object) string {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
	if obj.GetNamespace() != "" {
		return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	return kind + " " + obj.GetName()
}
