package incluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/conformance/runlock"
)

// SharedUserLabel marks what runs the suite as the runner's
// ServiceAccount besides submit's Jobs (the nightly CronJob and, through
// its jobTemplate, the Jobs it makes), so cleanup keeps the shared objects
// while one is there. Its value names the user.
const SharedUserLabel = "conformance.gpulab.io/shared-user"

// CleanupOptions says which runs' runner objects to delete.
type CleanupOptions struct {
	// Namespace is the runner's. Defaults to DefaultNamespace.
	Namespace string
	// RunIDs are the runs to clean up; AllRuns adds every run with a
	// runner object in Namespace and every run's marker and lock.
	RunIDs  []string
	AllRuns bool
	// DryRun deletes nothing: the report says what would go.
	DryRun bool
}

// CleanupReport is what a cleanup deleted (or, dry, would delete), and
// what it kept and why.
type CleanupReport struct {
	Deleted []string
	Kept    []string
}

// Cleanup deletes the run's runner objects and marker and, once nothing
// uses them, the shared objects Submit created (never ones it found). It
// returns what it deleted.
func Cleanup(ctx context.Context, c client.Client, namespace, runID string) ([]string, error) {
	rep, err := CleanupRuns(ctx, c, CleanupOptions{Namespace: namespace, RunIDs: []string{runID}})
	return rep.Deleted, err
}

// CleanupRuns deletes the runs' runner objects (RunObjects), their
// markers and the run lock where one of them holds it, then the shared
// objects Submit created, each only when nothing else uses it: no other
// run's Job in any namespace, no nightly CronJob or running Job of it, no
// other run's live marker (runlock) anywhere; and the namespace only when
// it holds nothing Submit did not create. Every error is returned, joined.
func CleanupRuns(ctx context.Context, c client.Client, o CleanupOptions) (CleanupReport, error) {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	var rep CleanupReport
	ids := slices.Clone(o.RunIDs)
	if o.AllRuns {
		found, err := runsIn(ctx, c, o.Namespace)
		if err != nil {
			return rep, err
		}
		ids = append(ids, found...)
	}
	cleaned := func(runID string) bool { return slices.Contains(ids, runID) }
	var errs []error
	for _, id := range ids {
		for _, obj := range RunObjects(o.Namespace, id) {
			errs = append(errs, deleteIfThere(ctx, c, obj, o.DryRun, &rep))
		}
	}
	entries, err := runlock.List(ctx, c, time.Now())
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	var others []runlock.Entry
	for _, e := range entries {
		if !o.AllRuns && !cleaned(e.RunID) {
			others = append(others, e)
			continue
		}
		rep.Deleted = append(rep.Deleted, e.String())
		if !o.DryRun {
			errs = append(errs, runlock.Delete(ctx, c, e))
		}
	}
	users, notes, err := Users(ctx, c, cleaned, others)
	rep.Kept = append(rep.Kept, notes...)
	if err != nil {
		return rep, errors.Join(append(errs, err)...)
	}
	errs = append(errs, cleanupShared(ctx, c, o.Namespace, users, o.DryRun, &rep))
	return rep, errors.Join(errs...)
}

// runsIn are the run ids of the runner objects in namespace.
func runsIn(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	var ids []string
	for _, l := range []client.ObjectList{&batchv1.JobList{}, &corev1.ConfigMapList{}} {
		if err := c.List(ctx, l, client.InNamespace(namespace), client.HasLabels{RunnerLabel}); err != nil {
			return nil, fmt.Errorf("listing the runs in %s: %w", namespace, err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			if id := item.(client.Object).GetLabels()[RunnerLabel]; !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

func deleteIfThere(ctx context.Context, c client.Client, obj client.Object, dryRun bool, rep *CleanupReport) error {
	var err error
	if dryRun {
		err = c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	} else {
		err = c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	}
	switch {
	case err == nil:
		rep.Deleted = append(rep.Deleted, kindName(obj))
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("deleting %s: %w", kindName(obj), err)
	}
	return nil
}

// Users are what still uses the shared objects, cluster-wide: runner Jobs
// of runs not cleaned, the nightly CronJob and its running Jobs
// (SharedUserLabel; a CronJob of the runner's name label too, from before
// that label), and the live runs among markers (runlock.List's, less the
// cleaned runs'). notes say which markers were not counted, because their
// runs stopped renewing them (killed).
func Users(ctx context.Context, c client.Client, cleaned func(runID string) bool, markers []runlock.Entry) (users, notes []string, err error) {
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.HasLabels{RunnerLabel}); err != nil {
		return nil, nil, fmt.Errorf("listing the runner Jobs: %w", err)
	}
	for _, j := range jobs.Items {
		if id := j.Labels[RunnerLabel]; j.DeletionTimestamp == nil && !cleaned(id) {
			users = append(users, fmt.Sprintf("Job %s/%s (run %s)", j.Namespace, j.Name, id))
		}
	}
	var nightly batchv1.JobList
	if err := c.List(ctx, &nightly, client.HasLabels{SharedUserLabel}); err != nil {
		return nil, nil, fmt.Errorf("listing the nightly's Jobs: %w", err)
	}
	for _, j := range nightly.Items {
		if j.DeletionTimestamp == nil && !finished(&j) {
			users = append(users, fmt.Sprintf("Job %s/%s (%s, running)", j.Namespace, j.Name, j.Labels[SharedUserLabel]))
		}
	}
	seen := map[string]bool{}
	for _, sel := range []client.ListOption{client.HasLabels{SharedUserLabel}, client.MatchingLabels{"app.kubernetes.io/name": rbac.Name}} {
		var cjs batchv1.CronJobList
		if err := c.List(ctx, &cjs, sel); err != nil {
			return nil, nil, fmt.Errorf("listing the nightly CronJobs: %w", err)
		}
		for _, cj := range cjs.Items {
			if key := cj.Namespace + "/" + cj.Name; cj.DeletionTimestamp == nil && !seen[key] {
				seen[key] = true
				users = append(users, "CronJob "+key)
			}
		}
	}
	for _, m := range markers {
		switch {
		case m.Lock: // its holder's marker counts
		case m.Expired:
			notes = append(notes, fmt.Sprintf("%s: not counted as a run (it stopped renewing it); `cleanup --run-id %s` removes it", m, m.RunID))
		default:
			users = append(users, fmt.Sprintf("run %s (%s)", m.RunID, m))
		}
	}
	return users, notes, nil
}

func finished(j *batchv1.Job) bool {
	for _, cond := range j.Status.Conditions {
		if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// cleanupShared deletes the shared objects Submit created in namespace
// (those carrying ManagedBy; never ones it found there) when users is
// empty, and the namespace only when it holds nothing but Submit's.
func cleanupShared(ctx context.Context, c client.Client, namespace string, users []string, dryRun bool, rep *CleanupReport) error {
	var errs []error
	shared := Shared(namespace)
	// Deleted after everything but the namespace (the loop runs backwards).
	shared = append(append(shared[:1:1], legacyShared(namespace)...), shared[1:]...)
	for i := len(shared) - 1; i >= 0; i-- {
		obj := shared[i]
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("reading %s: %w", kindName(obj), err))
			}
			continue
		}
		if obj.GetLabels()[ManagedByLabel] != ManagedBy {
			rep.Kept = append(rep.Kept, kindName(obj)+": submit did not create it (a reviewed install)")
			continue
		}
		if len(users) > 0 {
			rep.Kept = append(rep.Kept, kindName(obj)+": in use by "+strings.Join(users, ", "))
			continue
		}
		if _, ok := obj.(*corev1.Namespace); ok {
			foreign, err := Foreign(ctx, c, namespace)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if len(foreign) > 0 {
				rep.Kept = append(rep.Kept, kindName(obj)+": holds what submit did not create: "+strings.Join(foreign, ", "))
				continue
			}
		}
		errs = append(errs, deleteIfThere(ctx, c, obj, dryRun, rep))
	}
	return errors.Join(errs...)
}

// legacyShared are shared objects older submits made and Shared no longer
// has: the namespace-wide results Role and its binding (results Roles are
// per run now, with resourceNames). Cleanup removes them like the rest:
// only when Submit made them and nothing uses them.
func legacyShared(namespace string) []client.Object {
	meta := managed(rbac.Name+"-results", namespace)
	return []client.Object{&rbacv1.Role{ObjectMeta: meta}, &rbacv1.RoleBinding{ObjectMeta: *meta.DeepCopy()}}
}

// namespacedKinds are what Foreign looks for in the runner namespace:
// what a platform team puts beside the runner (a CronJob, a Deployment,
// credentials), not the events and endpoints that follow from those.
var namespacedKinds = []schema.GroupVersionKind{
	{Group: "batch", Version: "v1", Kind: "CronJob"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Version: "v1", Kind: "Pod"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Version: "v1", Kind: "PersistentVolumeClaim"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding"},
	{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"},
}

// Foreign lists what namespace holds that Submit did not create: anything
// without the runner's labels (RunnerLabel, ManagedBy, a run's marker or
// lock), but for what Kubernetes puts in every namespace.
func Foreign(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	var out []string
	for _, gvk := range namespacedKinds {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, l, client.InNamespace(namespace)); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return nil, fmt.Errorf("listing %ss in %s: %w", gvk.Kind, namespace, err)
		}
		for _, item := range l.Items {
			if !submits(gvk.Kind, &item) {
				out = append(out, gvk.Kind+" "+namespace+"/"+item.Name)
			}
		}
	}
	return out, nil
}

func submits(kind string, obj *metav1.PartialObjectMetadata) bool {
	labels := obj.Labels
	switch {
	case labels[ManagedByLabel] == ManagedBy, labels[RunnerLabel] != "", labels[runlock.MarkerLabel] != "", labels[runlock.LockLabel] != "":
		return true
	case kind == "ConfigMap" && obj.Name == "kube-root-ca.crt", kind == "ServiceAccount" && obj.Name == "default":
		return true // every namespace has them
	case kind == "ConfigMap" && strings.HasPrefix(obj.Name, ConfigMapName("")):
		return true // a run's results, named as Store names them
	}
	return false
}
