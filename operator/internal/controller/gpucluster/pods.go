package gpucluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/ownership"
)

func (r *Reconciler) listPods(ctx context.Context, cluster *gpulabv1alpha1.GPUCluster) ([]corev1.Pod, error) {
	var pods corev1.PodList
	// From the index, not a scan of the namespace: one namespace may hold
	// thousands of pods.
	if err := r.client.List(ctx, &pods, client.InNamespace(cluster.Namespace),
		client.MatchingFields{podClusterIndex: cluster.Name}); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	// Only pods this cluster controls: a user's pod with our label is not ours.
	owned := pods.Items[:0]
	for _, p := range pods.Items {
		if metav1.IsControlledBy(&p, cluster) {
			owned = append(owned, p)
		}
	}
	return owned, nil
}

// reconcilePods deletes pods that are no longer wanted (highest index
// first) or that failed, and creates the missing ones. A pod being deleted
// is left alone; its name is reused once it is gone.
func (r *Reconciler) reconcilePods(ctx context.Context, s *scope) error {
	if stale := s.stalePods(); len(stale) > 0 {
		return r.recreateGang(ctx, s, stale)
	}
	var extra, finished []corev1.Pod
	present := map[string]bool{}
	for _, p := range s.pods {
		present[p.Name] = true
		switch {
		case !p.DeletionTimestamp.IsZero():
		case s.desired.pods[p.Name] == nil:
			extra = append(extra, p)
		case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
			// A cluster's pods run until deleted; an exited one is replaced.
			finished = append(finished, p)
		}
	}
	sort.Slice(extra, func(i, j int) bool { return podIndex(&extra[i]) > podIndex(&extra[j]) })

	var errs []error
	if len(extra) > 0 {
		errs = append(errs, r.deletePods(ctx, s, extra, "scaled down"))
	}
	if len(finished) > 0 {
		errs = append(errs, r.deletePods(ctx, s, finished, "exited"))
	}

	var missing []*corev1.Pod
	for _, name := range slices.Sorted(maps.Keys(s.desired.pods)) {
		if present[name] {
			continue
		}
		pod := s.desired.pods[name].DeepCopy()
		if err := controllerutil.SetControllerReference(s.cluster, pod, r.scheme); err != nil {
			return err
		}
		missing = append(missing, pod)
	}
	created, createErrs := r.createPods(ctx, s, missing)
	errs = append(errs, createErrs...)
	for _, pod := range created {
		// The create response is an observation too: status counts the pod
		// now instead of waiting for the cache to report it.
		s.pods = append(s.pods, *pod)
	}
	// A gang's first pods are no news: the status's phases say it, and
	// an event for each of a burst's gangs is one more write in the
	// burst. Pods that replace others (exited, rolled out) are news.
	if len(created) > 0 && len(present) > 0 {
		names := make([]string, len(created))
		for i, p := range created {
			names[i] = p.Name
		}
		r.events.Eventf(s.cluster, nil, corev1.EventTypeNormal, "CreatedPods", "CreatePods", "Created %d pods: %s", len(created), summarize(names))
	}
	if err := errors.Join(errs...); err != nil {
		if !namespaceTerminating(err) {
			// (A terminating namespace refuses the event too.)
			r.events.Eventf(s.cluster, nil, corev1.EventTypeWarning, "PodsFailed", "ReconcilePods", "%v", err)
		}
		return err
	}
	return nil
}

// outdated says whether a pod was built from another spec than the current
// one. Pods without a hash (made before pods carried one) count as current,
// so an operator upgrade does not recreate every gang.
func outdated(p *corev1.Pod, want *corev1.Pod) bool {
	have, ok := p.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation]
	return want != nil && ok && have != want.Annotations[gpulabv1alpha1.PodTemplateHashAnnotation]
}

// stalePods names the pods, terminating ones included, built from an older
// spec.
func (s *scope) stalePods() []string {
	var names []string
	for i := range s.pods {
		if outdated(&s.pods[i], s.desired.pods[s.pods[i].Name]) {
			names = append(names, s.pods[i].Name)
		}
	}
	return names
}

// recreateGang rolls a spec change out gang-safely: every pod of the
// cluster goes, and none is created while any outdated pod remains, so the
// new gang (its PodGroup already resized) never binds beside members of
// the old one.
func (r *Reconciler) recreateGang(ctx context.Context, s *scope, stale []string) error {
	var live []corev1.Pod
	for _, p := range s.pods {
		if p.DeletionTimestamp.IsZero() {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil // waiting for the old pods to go; their deletion wakes us
	}
	r.events.Eventf(s.cluster, nil, corev1.EventTypeNormal, "RecreatingGang", "RolloutSpec",
		"The spec changed (outdated pods: %s): recreating the whole gang", summarize(stale))
	return r.deletePods(ctx, s, live, "spec changed")
}

// deleteOutdatedPods deletes the whole gang if any of its pods was built
// from an older spec, as a rollout does, and creates none: what a cluster
// does while its new PodGroup cannot be created yet.
func (r *Reconciler) deleteOutdatedPods(ctx context.Context, s *scope) error {
	if stale := s.stalePods(); len(stale) > 0 {
		return r.recreateGang(ctx, s, stale)
	}
	return nil
}

// createParallelism bounds concurrent pod creates within one reconcile: a
// gang's pods are created together, so its creation latency is a few round
// trips, not one per pod.
const createParallelism = 8

// createPods creates pods concurrently and returns those created, in the
// given order. AlreadyExists is our own earlier create not yet in the cache,
// or a pod someone else controls: the API server says which.
func (r *Reconciler) createPods(ctx context.Context, s *scope, pods []*corev1.Pod) ([]*corev1.Pod, []error) {
	ok := make([]bool, len(pods))
	errs := make([]error, len(pods))
	sem := make(chan struct{}, createParallelism)
	var wg sync.WaitGroup
	for i, pod := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := r.client.Create(ctx, pod)
			switch {
			case err == nil:
				ok[i] = true
			case apierrors.IsAlreadyExists(err):
				errs[i] = ownership.CheckExisting(ctx, r.apiReader, "Pod", &corev1.Pod{}, client.ObjectKeyFromObject(pod), s.cluster)
			default:
				errs[i] = fmt.Errorf("creating pod %s: %w", pod.Name, err)
			}
		}()
	}
	wg.Wait()
	var created []*corev1.Pod
	for i, pod := range pods {
		if ok[i] {
			created = append(created, pod)
		}
	}
	return created, slices.DeleteFunc(errs, func(e error) bool { return e == nil })
}

func (r *Reconciler) deletePods(ctx context.Context, s *scope, pods []corev1.Pod, why string) error {
	var deleted []string
	var errs []error
	for i := range pods {
		p := &pods[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		// The UID precondition makes sure we delete the pod we saw, not a
		// replacement created under the same name since.
		err := r.client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		switch {
		case err == nil:
			deleted = append(deleted, p.Name)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			errs = append(errs, fmt.Errorf("deleting pod %s: %w", p.Name, err))
		}
	}
	if len(deleted) > 0 {
		r.events.Eventf(s.cluster, nil, corev1.EventTypeNormal, "DeletedPods", "DeletePods", "Deleted %d pods (%s): %s", len(deleted), why, summarize(deleted))
	}
	return errors.Join(errs...)
}

func podIndex(p *corev1.Pod) int {
	i, err := strconv.Atoi(p.Labels[gpulabv1alpha1.IndexLabel])
	if err != nil {
		return -1
	}
	return i
}

func summarize(names []string) string {
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}
