// Package gpujob reconciles GPUJobs: a run-to-completion lifecycle on top of
// a GPUCluster (its own, from a template, or an existing one). The job
// creates the cluster, waits for it to be Ready, runs a batch/v1 submitter
// Job, retries up to backoffLimit, enforces a deadline, and on finish
// applies its cleanup policy, which releases the gang.
//
// Every name is recorded in status before the object is created, so an
// operator restarted between the two finds what it made instead of making
// another.
package gpujob

import (
	"context"
	"errors"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/operator/internal/cachesync"
	"github.com/gpulab/gpulab/operator/internal/metrics"
	"github.com/gpulab/gpulab/operator/internal/ownership"
)

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "gpujob"

// recheckConflict is how often a job blocked by a foreign object under one
// of its children's names looks again.
const recheckConflict = 15 * time.Second

// clusterRefIndex indexes GPUJobs by the existing cluster they run on.
const clusterRefIndex = "gpulab.io/cluster-ref"

// JobLabel names the GPUJob a submitter Job belongs to.
const JobLabel = "gpulab.io/gpujob"

// +kubebuilder:rbac:groups=gpulab.io,resources=gpujobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=gpulab.io,resources=gpujobs/status,verbs=get;update
// +kubebuilder:rbac:groups=gpulab.io,resources=gpujobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=gpulab.io,resources=gpuclusters,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete

// Options configures the reconciler.
type Options struct {
	// MaxConcurrentReconciles bounds parallel reconciles. Defaults to 4.
	MaxConcurrentReconciles int
	// SkipNameValidation lets several managers run in one process (tests).
	SkipNameValidation bool
}

// Reconciler reconciles GPUJobs.
type Reconciler struct {
	client client.Client
	// writes is client's read-your-writes layer, fed by the informers.
	writes    *cachesync.Client
	apiReader client.Reader
	scheme    *runtime.Scheme
	events    recorder.EventRecorder
	metrics   *metrics.Jobs
	opts      Options
	now       func() time.Time
	// staleRetries counts each job's consecutive reconciles cut short by a
	// cache behind the API server (types.NamespacedName → int), for backoff.
	staleRetries sync.Map
}

// New builds a Reconciler from a manager.
func New(mgr ctrl.Manager, m *metrics.Jobs, opts Options) *Reconciler {
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 4
	}
	writes := cachesync.NewClient(mgr.GetClient())
	return &Reconciler{client: writes, writes: writes, apiReader: mgr.GetAPIReader(), scheme: mgr.GetScheme(),
		events: mgr.GetEventRecorder(ControllerName), metrics: m, opts: opts, now: time.Now}
}

// SetupWithManager watches GPUJobs (spec changes), the clusters they own or
// reference (status changes matter: Ready starts the submitter) and their
// submitter Jobs.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := r.writes.Track(ctx, mgr.GetCache(), &gpulabv1alpha1.GPUJob{}, &gpulabv1alpha1.GPUCluster{}, &batchv1.Job{}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &gpulabv1alpha1.GPUJob{}, clusterRefIndex, func(o client.Object) []string {
		j := o.(*gpulabv1alpha1.GPUJob)
		if j.Spec.ClusterRef == nil {
			return nil
		}
		return []string{j.Spec.ClusterRef.Name}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&gpulabv1alpha1.GPUJob{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&batchv1.Job{}).
		Watches(&gpulabv1alpha1.GPUCluster{}, handler.EnqueueRequestsFromMapFunc(r.jobsForCluster)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles, SkipNameValidation: &r.opts.SkipNameValidation}).
		Complete(r)
}

func (r *Reconciler) jobsForCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == "GPUJob" && ref.APIVersion == gpulabv1alpha1.GroupVersion.String() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}})
		}
	}
	var jobs gpulabv1alpha1.GPUJobList
	if err := r.client.List(ctx, &jobs, client.InNamespace(o.GetNamespace()), client.MatchingFields{clusterRefIndex: o.GetName()}); err == nil {
		for _, j := range jobs.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&j)})
		}
	}
	return reqs
}

// Reconcile advances one GPUJob through its phases.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	job := &gpulabv1alpha1.GPUJob{}
	if err := r.client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !job.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	s := &scope{job: job, old: job.Status.DeepCopy(), now: r.now()}
	result, err := r.step(ctx, s)
	if errors.Is(err, errStale) {
		// Nothing was done; start over from a fresher copy, later each time
		// the cache is still behind.
		n, _ := r.staleRetries.Load(req.NamespacedName)
		tries, _ := n.(int)
		r.staleRetries.Store(req.NamespacedName, tries+1)
		return ctrl.Result{RequeueAfter: staleBackoff(tries)}, nil
	}
	r.staleRetries.Delete(req.NamespacedName)
	switch {
	case ownership.IsConflict(err):
		// A condition and an event, not a crash loop: the other object is
		// not ours to change.
		if was := meta.FindStatusCondition(s.old.Conditions, gpulabv1alpha1.ConditionReconcileSucceeded); was == nil || was.Message != err.Error() {
			r.events.Eventf(job, nil, corev1.EventTypeWarning, gpulabv1alpha1.ReasonNameConflict, "CheckOwnership", "%v", err)
		}
		setCondition(s, gpulabv1alpha1.ConditionReconcileSucceeded, false, gpulabv1alpha1.ReasonNameConflict, err.Error())
		result, err = ctrl.Result{RequeueAfter: recheckConflict}, nil
	case err != nil:
		setCondition(s, gpulabv1alpha1.ConditionReconcileSucceeded, false, gpulabv1alpha1.ReasonReconcileError, err.Error())
	default:
		setCondition(s, gpulabv1alpha1.ConditionReconcileSucceeded, true, gpulabv1alpha1.ReasonReconciled, "the last reconcile completed")
	}
	if werr := r.writeStatus(ctx, s); werr != nil {
		return ctrl.Result{}, errors.Join(err, werr)
	}
	r.metrics.SetPhase(req.NamespacedName, string(job.Status.Phase))
	return result, err
}

// staleBackoff is the wait before the retry after tries stale reconciles:
// 50 ms, doubling, at most 5 s. A cache usually catches up within the
// first; one that does not (a slow or partitioned watch) is not hammered.
func staleBackoff(tries int) time.Duration {
	const first, most = 50 * time.Millisecond, 5 * time.Second
	if tries >= 7 {
		return most
	}
	return min(first<<tries, most)
}

// scope carries one reconcile's job, its status as read, and the time.
type scope struct {
	job *gpulabv1alpha1.GPUJob
	old *gpulabv1alpha1.GPUJobStatus
	now time.Time
	// wake is the earliest time a timer (deadline, TTL) needs a reconcile.
	wake time.Time
}

// requeueBy asks for a reconcile at t, a wait no watch reports.
func (s *scope) requeueBy(t time.Time) {
	if s.wake.IsZero() || t.Before(s.wake) {
		s.wake = t
	}
}

func (s *scope) result() ctrl.Result {
	if s.wake.IsZero() {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(s.wake.Sub(s.now), time.Second)}
}

func (s *scope) finished() bool {
	return s.job.Status.Phase == gpulabv1alpha1.JobSucceeded || s.job.Status.Phase == gpulabv1alpha1.JobFailed
}

func (s *scope) ownsCluster() bool { return s.job.Spec.ClusterTemplate != nil }

func (s *scope) backoffLimit() int32 {
	if s.job.Spec.BackoffLimit == nil {
		return 0
	}
	return *s.job.Spec.BackoffLimit
}

func (s *scope) retryPolicy() gpulabv1alpha1.RetryPolicy {
	switch {
	case s.job.Spec.RetryPolicy != "":
		return s.job.Spec.RetryPolicy
	case s.ownsCluster():
		return gpulabv1alpha1.RetryNewCluster
	default:
		return gpulabv1alpha1.RetryReuseCluster
	}
}

func (s *scope) cleanupPolicy() gpulabv1alpha1.CleanupPolicy {
	switch {
	case s.job.Spec.CleanupPolicy != "":
		return s.job.Spec.CleanupPolicy
	case s.ownsCluster():
		return gpulabv1alpha1.CleanupDeleteCluster
	default:
		return gpulabv1alpha1.CleanupKeepCluster
	}
}
