// Package cleanup finds what a conformance run created, by the run label
// everything it creates carries (pods through their templates too), and
// deletes it: the suite's own final cleanup, and `gpulab-conformance
// cleanup --run-id` after a run that was killed. It never touches an
// object without the label, so other tenants of a shared namespace keep
// theirs.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RunIDLabel marks everything a run creates, so its cleanup, on success,
// failure, a signal or after a kill, finds all of it.
const RunIDLabel = "conformance.gpulab.io/run-id"

// Kinds are what a run creates, in the order they are deleted: owners
// first, so their operators stop making pods, then pods, then the
// namespaces the run created. Queues go last (Run), once the pods that
// hold them are gone. A kind the cluster does not serve (KubeRay's on a
// cluster without it) is skipped.
var Kinds = []schema.GroupVersionKind{
	{Group: "gpulab.io", Version: "v1alpha1", Kind: "GPUJob"},
	{Group: "gpulab.io", Version: "v1alpha1", Kind: "GPUCluster"},
	{Group: "ray.io", Version: "v1", Kind: "RayCluster"},
	{Group: "batch.volcano.sh", Version: "v1alpha1", Kind: "Job"},
	podGVK,
	{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaimTemplate"},
	namespaceGVK,
}

var (
	podGVK       = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	queueGVK     = schema.GroupVersionKind{Group: "scheduling.volcano.sh", Version: "v1beta1", Kind: "Queue"}
)

// Options says whose objects Run deletes.
type Options struct {
	// Client talks to the cluster. Required.
	Client client.Client
	// RunID selects one run's objects. Exactly one of RunID and AllRuns.
	RunID string
	// AllRuns selects every run's objects (any value of RunIDLabel).
	AllRuns bool
	// Timeout bounds the wait for the run's pods to go. Default
	// PodTimeout of the pods found.
	Timeout time.Duration
	// Interval is how often the wait lists the run's pods. Default
	// DefaultInterval.
	Interval time.Duration
	// DryRun lists what would be deleted and deletes nothing.
	DryRun bool
	// Log receives a line per kind found. Default: none.
	Log io.Writer
}

// DefaultInterval is how often Run checks the run's pods are gone: each
// check is a label-selected, metadata-only list, and a second is well
// under the time a pod takes to terminate.
const DefaultInterval = time.Second

// PodTimeout is how long n pods may take to go: 3 minutes, or 150 ms a
// pod when there are more. Deleting 3,000 pods through kwok on a
// 1,253-node testbed went at 15 a second, so 3 minutes failed a teardown
// that was only slow.
func PodTimeout(n int) time.Duration {
	return max(3*time.Minute, time.Duration(n)*150*time.Millisecond)
}

// Report is what Run found, by kind.
type Report struct {
	Found map[string][]string // kind → namespace/name
}

// Selector selects one run's objects, or every run's.
func Selector(runID string, allRuns bool) client.ListOption {
	if allRuns {
		return client.HasLabels{RunIDLabel}
	}
	return client.MatchingLabels{RunIDLabel: runID}
}

// Run deletes the selected runs' objects (Kinds), waits until their pods
// are gone, then deletes their Volcano queues. Every error is returned,
// joined; one kind failing does not stop the others.
func Run(ctx context.Context, o Options) (Report, error) {
	if (o.RunID == "") == !o.AllRuns {
		return Report{}, errors.New("cleanup: give a run id or all runs, not both or neither")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	sel := Selector(o.RunID, o.AllRuns)
	rep := Report{Found: map[string][]string{}}
	var errs []error
	var namespaces []string
	pods := 0
	for _, gvk := range Kinds {
		items, err := list(ctx, o.Client, gvk, sel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if gvk == podGVK {
			pods = len(items)
		}
		for i := range items {
			if gvk == namespaceGVK {
				namespaces = append(namespaces, items[i].Name)
			}
			errs = append(errs, o.delete(ctx, gvk, &items[i], &rep))
		}
	}
	if !o.DryRun {
		timeout := o.Timeout
		if timeout == 0 {
			timeout = PodTimeout(pods)
		}
		if err := WaitPodsGone(ctx, o.Client, sel, namespaces, timeout, o.Interval); err != nil {
			errs = append(errs, err)
		}
	}
	queues, err := list(ctx, o.Client, queueGVK, sel)
	errs = append(errs, err)
	for i := range queues {
		errs = append(errs, o.delete(ctx, queueGVK, &queues[i], &rep))
	}
	for kind, names := range rep.Found {
		verb := "deleted"
		if o.DryRun {
			verb = "would delete"
		}
		fmt.Fprintf(o.Log, "%s %d %s: %s\n", verb, len(names), kind, strings.Join(names, ", "))
	}
	return rep, errors.Join(errs...)
}

func (o Options) delete(ctx context.Context, gvk schema.GroupVersionKind, obj *metav1.PartialObjectMetadata, rep *Report) error {
	name := obj.Name
	if obj.Namespace != "" {
		name = obj.Namespace + "/" + name
	}
	rep.Found[gvk.Kind] = append(rep.Found[gvk.Kind], name)
	if o.DryRun || obj.DeletionTimestamp != nil {
		return nil
	}
	obj.SetGroupVersionKind(gvk)
	err := o.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s: %w", gvk.Kind, name, err)
	}
	return nil
}

// list is the metadata of every object of the kind that sel selects, in
// every namespace; nothing when the cluster does not serve the kind.
func list(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := c.List(ctx, l, opts...); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
	return l.Items, nil
}

// Pods lists, metadata only, the pods sel selects in namespace ("" for
// every namespace): a shared namespace's other pods are never counted.
func Pods(ctx context.Context, c client.Client, namespace string, sel client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	opts := []client.ListOption{sel}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	return list(ctx, c, podGVK, opts...)
}

// WaitPodsGone waits until no pod sel selects is left, nor any pod in the
// namespaces given (the run's own, where a pod without the label is the
// run's too). Each check is metadata-only and label- or namespace-scoped,
// never a list of the whole cluster's pods. interval 0 is DefaultInterval.
func WaitPodsGone(ctx context.Context, c client.Client, sel client.ListOption, namespaces []string, timeout, interval time.Duration) error {
	if interval == 0 {
		interval = DefaultInterval
	}
	detail := ""
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		seen := map[string]bool{}
		lists := [][]client.ListOption{{sel}}
		for _, ns := range namespaces {
			lists = append(lists, []client.ListOption{client.InNamespace(ns)})
		}
		for _, opts := range lists {
			pods, err := list(ctx, c, podGVK, opts...)
			if err != nil {
				// A failed list is not evidence either way: try again.
				detail = err.Error()
				return false, nil
			}
			for _, p := range pods {
				seen[p.Namespace+"/"+p.Name] = true
			}
		}
		detail = fmt.Sprintf("%d of the run's pods left", len(seen))
		return len(seen) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the run's pods to go: %w (%s)", err, detail)
	}
	return nil
}
