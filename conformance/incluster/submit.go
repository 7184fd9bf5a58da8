package incluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
)

// systemNamespaces are Kubernetes' own: a guest's Job, Role and results
// do not belong there.
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// operatorLabel is on gpulab's operator Deployment, in the chart and in
// operator/config alike.
const operatorLabel = "app.kubernetes.io/name=gpulab-operator"

// CheckNamespace refuses a runner namespace that is not the runner's to
// share: Kubernetes' own, or one holding gpulab's operator (the chart's
// release namespace), whose objects a run's Role and cleanup would then
// sit among. A namespace whose Deployments the submitter may not list is
// let through: what cannot be seen is not refused.
func CheckNamespace(ctx context.Context, c client.Client, ns string) error {
	const allow = "--runner-namespace-allow-system uses it anyway"
	if slices.Contains(systemNamespaces, ns) {
		return fmt.Errorf("--runner-namespace=%s is a Kubernetes system namespace; give the runner its own (default %s), or %s", ns, DefaultNamespace, allow)
	}
	var deps appsv1.DeploymentList
	sel, err := metav1.ParseToLabelSelector(operatorLabel)
	if err != nil {
		return err
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return err
	}
	switch err := c.List(ctx, &deps, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: ls}, client.Limit(1)); {
	case apierrors.IsForbidden(err):
		return nil
	case err != nil:
		return fmt.Errorf("checking --runner-namespace=%s: %w", ns, err)
	case len(deps.Items) > 0:
		return fmt.Errorf("--runner-namespace=%s holds gpulab's operator (Deployment %s): give the runner its own namespace (default %s), or %s",
			ns, deps.Items[0].Name, DefaultNamespace, allow)
	}
	return nil
}

// Submit creates the shared objects that are not there yet (an existing
// one is left as it is, whoever made it), the run's own objects (empty
// results ConfigMaps, the Role on them, the files it reads), which must
// not exist, and last the run's Job. It returns the shared objects it
// created.
func Submit(ctx context.Context, c client.Client, o Options) ([]string, error) {
	o = o.withDefaults()
	if o.Image == "" || o.RunID == "" {
		return nil, errors.New("submit: an image and a run id are required")
	}
	if !o.AllowSystemNamespace {
		if err := CheckNamespace(ctx, c, o.Namespace); err != nil {
			return nil, err
		}
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
	// The ConfigMaps and Role come before the Job, so that its pod finds
	// them; a run id used before stops here, changing nothing of that run.
	own := runObjects(o)
	for _, obj := range own {
		if err := c.Create(ctx, obj); err != nil {
			return created, fmt.Errorf("creating %s for run %s: %w", kindName(obj), o.RunID, err)
		}
	}
	job := Job(o)
	if err := c.Create(ctx, job); err != nil {
		return created, fmt.Errorf("creating the runner Job %s/%s: %w", o.Namespace, JobName(o.RunID), err)
	}
	return created, adopt(ctx, c, job, own)
}

// adopt makes the Job the owner of the run's Role, binding and files, so
// that the garbage collector removes them with it even where nothing else
// cleans up (a bearer token should not outlive its run). The results are
// not adopted: they are what the run leaves for retrieve.
func adopt(ctx context.Context, c client.Client, job client.Object, objs []client.Object) error {
	ref := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.GetName(), UID: job.GetUID()}
	parts := PartNames(ConfigMapName(job.GetLabels()[RunnerLabel]))
	var errs []error
	for _, obj := range objs {
		if cm, ok := obj.(*corev1.ConfigMap); ok && slices.Contains(parts, cm.Name) {
			continue
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		obj.SetOwnerReferences(append(obj.GetOwnerReferences(), ref))
		if err := c.Patch(ctx, obj, patch); err != nil {
			errs = append(errs, fmt.Errorf("owning %s by the runner Job: %w", kindName(obj), err))
		}
	}
	return errors.Join(errs...)
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
		"give --runner-namespace the namespace it binds (the chart's runner: its release namespace, "+
		"with --runner-namespace-allow-system as it holds the operator)", crb.Name, bound, namespace, rbac.Name)
}

func kindName(obj client.Object) string {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
	if obj.GetNamespace() != "" {
		return kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	return kind + " " + obj.GetName()
}
