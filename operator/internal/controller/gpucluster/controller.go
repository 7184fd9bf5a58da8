// Package gpucluster reconciles GPUClusters: a head pod and worker groups,
// created as bare pods with deterministic names, gang-scheduled through a
// PodGroup (Volcano's or Kubernetes' own, package scheduler) sized from the
// pods as built and checked against the healthy GPU inventory.
package gpucluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	resourceapi "k8s.io/api/resource/v1"
	k8sscheduling "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/karpenter"
	"github.com/gpulab/gpulab/operator/internal/cachesync"
	"github.com/gpulab/gpulab/operator/internal/capacity"
	"github.com/gpulab/gpulab/operator/internal/metrics"
	"github.com/gpulab/gpulab/operator/internal/ownership"
	"github.com/gpulab/gpulab/operator/internal/scheduler"
)

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "gpucluster"

// productIndex indexes GPUClusters by the GPU products they request ("*"
// for any), so an inventory change wakes only the clusters it can affect.
const productIndex = "gpulab.io/gpu-product"

// phaseIndex indexes GPUClusters by status.phase, so a node that comes back
// wakes only the Unschedulable clusters.
const phaseIndex = "gpulab.io/phase"

// podClusterIndex indexes pods by their cluster label, so a cluster's pods
// are listed without scanning its namespace's.
const podClusterIndex = "gpulab.io/cluster"

// recheckCapacity is how often a cluster that cannot fit is re-checked when
// capacity comes from node allocatable, which no watch of ours reports.
const recheckCapacity = 30 * time.Second

// +kubebuilder:rbac:groups=gpulab.io,resources=gpuclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=gpulab.io,resources=gpuclusters/status,verbs=get;update
// +kubebuilder:rbac:groups=gpulab.io,resources=gpuclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=gpulab.io,resources=gpuinventories,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.volcano.sh,resources=podgroups,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=podgroups,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaimtemplates,verbs=get;create;delete
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices;deviceclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=karpenter.sh,resources=nodepools,verbs=get;list;watch

// Options configures the reconciler. Zero values take the defaults noted.
type Options struct {
	// MaxConcurrentReconciles bounds parallel reconciles. Defaults to 4.
	MaxConcurrentReconciles int
	// ReconcileTimeout bounds one reconcile. Defaults to 1 minute.
	ReconcileTimeout time.Duration
	// VolcanoInstalled says whether PodGroups are served; without it the
	// controller does not watch them and volcano clusters report it.
	VolcanoInstalled bool
	// NativeGangsServed says whether scheduling.k8s.io PodGroups are
	// served (the GenericWorkload gate); without it the controller does
	// not watch them and kubernetes clusters report it.
	NativeGangsServed bool
	// NodePoolsServed says whether Karpenter's NodePools are served: a
	// gang larger than today's nodes then waits for the nodes a NodePool
	// can add (spec.scheduling.capacity Auto), and NodePool changes wake
	// the clusters that do not fit.
	NodePoolsServed bool
	// DRAServed says whether resource.k8s.io/v1 is served; with it the
	// capacity view counts each DeviceClass's devices from the
	// ResourceSlices, and slice changes wake Unschedulable clusters.
	DRAServed bool
	// StatusCoalesce is how long after a status write a progress-only
	// change waits (status.go). Defaults to DefaultStatusCoalesce.
	StatusCoalesce time.Duration
	// FirstStatusDelay is how long a new cluster's first status waits
	// while it only says the gang is on its way (status.go). Defaults to
	// DefaultFirstStatusDelay.
	FirstStatusDelay time.Duration
	// AgentLeaseNamespace holds the node agents' heartbeat Leases, which the
	// manager's cache must watch. Defaults to
	// gpulabv1alpha1.DefaultHeartbeatLeaseNamespace.
	AgentLeaseNamespace string
	// SkipNameValidation lets several managers run in one process (tests).
	SkipNameValidation bool
}

// Reconciler reconciles GPUClusters.
type Reconciler struct {
	client client.Client
	// writes is client's read-your-writes layer, fed by the informers.
	writes    *cachesync.Client
	apiReader client.Reader
	scheme    *runtime.Scheme
	events    recorder.EventRecorder
	metrics   *metrics.Clusters
	opts      Options
	// statusHeld holds, per cluster, until when progress-only status
	// writes wait, and pendingScheduled the scheduled time a deferred
	// write saw, for coalescing progress writes (status.go).
	statusHeld, pendingScheduled sync.Map
	// namespaceGone holds the UID of each cluster whose namespace refused
	// a create because it is terminating. A namespace never stops
	// terminating, so such a cluster creates nothing more: otherwise every
	// pod the namespace controller deletes wakes it to recreate its pods,
	// and each refusal is another refused event, retried by the recorder.
	namespaceGone sync.Map
	// fleet is the capacity view, rebuilt only when it may have moved.
	fleet *fleetView
}

// New builds a Reconciler from a manager.
func New(mgr ctrl.Manager, m *metrics.Clusters, opts Options) *Reconciler {
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 4
	}
	if opts.ReconcileTimeout == 0 {
		opts.ReconcileTimeout = time.Minute
	}
	if opts.StatusCoalesce == 0 {
		opts.StatusCoalesce = DefaultStatusCoalesce
	}
	if opts.FirstStatusDelay == 0 {
		opts.FirstStatusDelay = DefaultFirstStatusDelay
	}
	if opts.AgentLeaseNamespace == "" {
		opts.AgentLeaseNamespace = gpulabv1alpha1.DefaultHeartbeatLeaseNamespace
	}
	// Reads see this controller's own writes at once (cachesync).
	writes := cachesync.NewClient(mgr.GetClient())
	return &Reconciler{
		client:    writes,
		writes:    writes,
		apiReader: mgr.GetAPIReader(),
		scheme:    mgr.GetScheme(),
		events:    mgr.GetEventRecorder(ControllerName),
		metrics:   m,
		opts:      opts,
		fleet:     &fleetView{leaseNamespace: opts.AgentLeaseNamespace, dra: opts.DRAServed},
	}
}

// SetupWithManager registers the controller: spec, label and annotation
// changes of GPUClusters (not status writes), the changes of the children
// it controls that matter to it (events.go), and inventory changes of the
// products a cluster requests.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &gpulabv1alpha1.GPUCluster{}, productIndex, indexProducts); err != nil {
		return fmt.Errorf("indexing GPUClusters by product: %w", err)
	}
	if err := r.writes.LabelIndex(ctx, mgr.GetFieldIndexer(), &corev1.Pod{}, podClusterIndex, gpulabv1alpha1.ClusterLabel); err != nil {
		return err
	}
	written := []client.Object{&gpulabv1alpha1.GPUCluster{}, &corev1.Pod{}, &corev1.Service{}}
	if r.opts.VolcanoInstalled {
		written = append(written, &schedulingv1beta1.PodGroup{})
	}
	if r.opts.NativeGangsServed {
		written = append(written, &k8sscheduling.PodGroup{})
	}
	if err := r.writes.Track(ctx, mgr.GetCache(), written...); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &gpulabv1alpha1.GPUCluster{}, phaseIndex, func(obj client.Object) []string {
		return []string{string(obj.(*gpulabv1alpha1.GPUCluster).Status.Phase)}
	}); err != nil {
		return fmt.Errorf("indexing GPUClusters by phase: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&gpulabv1alpha1.GPUCluster{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Pod{}, ownerHandler(mgr.GetScheme(), mgr.GetRESTMapper(), r.opts.StatusCoalesce, r.podTurned), builder.WithPredicates(podChanged)).
		Watches(&corev1.Service{}, ownerHandler(mgr.GetScheme(), mgr.GetRESTMapper(), r.opts.StatusCoalesce, nil)).
		Watches(&gpulabv1alpha1.GPUInventory{}, handler.EnqueueRequestsFromMapFunc(r.clustersForInventory),
			builder.WithPredicates(r.inventoryChanged())).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.clustersForLease),
			builder.WithPredicates(r.leaseChanged())).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.clustersForNode),
			builder.WithPredicates(nodeCapacityChanged)).
		// gpulab_nodes, from every node event; enqueues nothing.
		Watches(&corev1.Node{}, r.metrics.NodeEvents()).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles,
			ReconciliationTimeout:   r.opts.ReconcileTimeout,
			SkipNameValidation:      &r.opts.SkipNameValidation,
		})
	if r.opts.VolcanoInstalled {
		b = b.Watches(&schedulingv1beta1.PodGroup{}, ownerHandler(mgr.GetScheme(), mgr.GetRESTMapper(), r.opts.StatusCoalesce, podGroupTurned), builder.WithPredicates(podGroupChanged))
	}
	if r.opts.DRAServed {
		// Capacity of the clusters that claim their GPUs.
		b = b.Watches(&resourceapi.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(r.clustersForDevices)).
			Watches(&resourceapi.DeviceClass{}, handler.EnqueueRequestsFromMapFunc(r.clustersForDevices))
	}
	if r.opts.NodePoolsServed {
		nodePool := &unstructured.Unstructured{}
		nodePool.SetGroupVersionKind(karpenter.NodePoolKind)
		b = b.Watches(nodePool, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			return r.unschedulableClusters(ctx)
		}))
	}
	if r.opts.NativeGangsServed {
		b = b.Watches(&k8sscheduling.PodGroup{}, ownerHandler(mgr.GetScheme(), mgr.GetRESTMapper(), r.opts.StatusCoalesce, nativePodGroupTurned), builder.WithPredicates(nativePodGroupChanged))
	}
	return b.Complete(r)
}

func indexProducts(obj client.Object) []string {
	c := obj.(*gpulabv1alpha1.GPUCluster)
	var out []string
	add := func(r *gpulabv1alpha1.GPURequest) {
		switch {
		case r == nil:
		case r.Product == "":
			out = append(out, "*")
		default:
			out = append(out, r.Product)
		}
	}
	add(c.Spec.Head.GPUs)
	for i := range c.Spec.WorkerGroups {
		add(c.Spec.WorkerGroups[i].GPUs)
	}
	return out
}

func (r *Reconciler) clustersForInventory(ctx context.Context, obj client.Object) []reconcile.Request {
	// Before the clusters are enqueued, so the reconciles see the change.
	r.fleet.invalidate()
	inv := obj.(*gpulabv1alpha1.GPUInventory)
	var reqs []reconcile.Request
	for _, product := range []string{inv.Status.Summary.Product, "*"} {
		var list gpulabv1alpha1.GPUClusterList
		if err := r.client.List(ctx, &list, client.MatchingFields{productIndex: product}); err != nil {
			log.FromContext(ctx).Error(err, "listing clusters for inventory", "inventory", inv.Name)
			continue
		}
		for _, c := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
	return reqs
}

// nodeCapacityChanged passes node events that can move the capacity view:
// a node added or removed, cordoned or uncordoned, Ready or not, or with
// other GPUs or labels; a kubelet heartbeat does not.
var nodeCapacityChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	was, ok1 := e.ObjectOld.(*corev1.Node)
	now, ok2 := e.ObjectNew.(*corev1.Node)
	return !ok1 || !ok2 || capacity.NodeChanged(was, now)
}}

// clustersForNode wakes the Unschedulable clusters after a node change: a
// node that returns can make them fit, and nothing else re-checks a
// cluster whose capacity comes from fresh inventories. Clusters in other
// phases keep what they have, so they are not woken. The workqueue folds
// a burst of node changes into one reconcile per cluster.
func (r *Reconciler) clustersForNode(ctx context.Context, _ client.Object) []reconcile.Request {
	// Before the clusters are enqueued, so the reconciles see the change.
	r.fleet.invalidate()
	return r.unschedulableClusters(ctx)
}

// clustersForDevices is clustersForNode for a ResourceSlice or DeviceClass
// change: the DRA devices are counted again.
func (r *Reconciler) clustersForDevices(ctx context.Context, _ client.Object) []reconcile.Request {
	r.fleet.invalidateDRA()
	return r.unschedulableClusters(ctx)
}

// unschedulableClusters are the clusters a capacity change may wake: the
// Unschedulable ones, and those waiting for nodes.
func (r *Reconciler) unschedulableClusters(ctx context.Context) []reconcile.Request {
	var reqs []reconcile.Request
	for _, phase := range []gpulabv1alpha1.ClusterPhase{gpulabv1alpha1.ClusterUnschedulable, gpulabv1alpha1.ClusterWaitingForNodes} {
		var list gpulabv1alpha1.GPUClusterList
		if err := r.client.List(ctx, &list, client.MatchingFields{phaseIndex: string(phase)}); err != nil {
			log.FromContext(ctx).Error(err, "listing clusters for a capacity change", "phase", phase)
			continue
		}
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// scope carries what one reconcile read and decided.
type scope struct {
	cluster       *gpulabv1alpha1.GPUCluster
	gang          scheduler.Backend
	desired       *desiredState
	fromInventory bool
	// staleInventories names nodes whose GPUInventory was not trusted.
	staleInventories []string
	// pods are the cluster's pods; podsListed says they were read, so
	// status may count them (an empty list after a failed read is no
	// observation).
	pods       []corev1.Pod
	podsListed bool
	podGroup   *gpulabv1alpha1.PodGroupStatus
	// gangErr is why the gang could not be ensured (e.g. Volcano absent,
	// or its previous PodGroup still being deleted).
	gangErr error
	// conflict is a child name held by an object this cluster does not control.
	conflict error
	// replacing is a child name still held by this cluster's deleted
	// previous incarnation, which the garbage collector removes.
	replacing error
	// reconcileErr is what failed this reconcile, recorded on a condition.
	reconcileErr error
	// invalid is why the spec, though accepted by the schema, cannot be built.
	invalid error
	// statusDeferred is how long a progress-only status write was put off.
	statusDeferred time.Duration
}

// recheckConflict is how often a cluster blocked by a foreign object under
// one of its children's names looks again: the other object's deletion
// wakes its own controller, not this cluster.
const recheckConflict = 15 * time.Second

// Reconcile drives one GPUCluster toward its spec: read, compute the desired
// children in memory, act on the difference, then write status from what
// was observed. Status is written on every path, errors included, so
// conditions never go stale behind a failing read.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result ctrl.Result, err error) {
	cluster := &gpulabv1alpha1.GPUCluster{}
	if err := r.client.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.Forget(req.NamespacedName)
			r.statusHeld.Delete(req.NamespacedName)
			r.pendingScheduled.Delete(req.NamespacedName)
			r.namespaceGone.Delete(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !cluster.DeletionTimestamp.IsZero() {
		// Owner references let the garbage collector remove the children.
		return ctrl.Result{}, nil
	}

	s := &scope{cluster: cluster, gang: scheduler.For(cluster.Spec.Scheduling.Scheduler)}
	defer func() {
		switch {
		case ownership.IsReplacing(err):
			// The garbage collector frees the names; the children's
			// deletions wake us, the recheck is a fallback.
			s.replacing = err
			result, err = ctrl.Result{RequeueAfter: recheckConflict}, nil
		case ownership.IsConflict(err):
			// A condition and an event, not a crash loop: nothing we can
			// do changes the other object.
			s.conflict = err
			result, err = ctrl.Result{RequeueAfter: recheckConflict}, nil
		}
		s.reconcileErr = err
		err = errors.Join(err, r.updateStatus(ctx, s))
		if d := s.statusDeferred; d > 0 && (result.RequeueAfter == 0 || d < result.RequeueAfter) {
			result.RequeueAfter = d
		}
		if err != nil && namespaceTerminating(err) {
			// The namespace is going away with the cluster: nothing to build.
			r.namespaceGone.Store(req.NamespacedName, cluster.UID)
			result, err = ctrl.Result{}, nil
		}
	}()
	return r.reconcile(ctx, s)
}

// reconcile reads what the cluster depends on, computes the desired
// children and acts on the difference.
func (r *Reconciler) reconcile(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.invalid = validateSpec(s.cluster); s.invalid != nil {
		// Nothing can be built until the spec changes, which wakes us.
		return ctrl.Result{}, nil
	}
	fleet, fromInventory, stale, err := r.fleet.get(ctx, r.client, time.Now())
	if err != nil {
		return ctrl.Result{}, err
	}
	s.fromInventory, s.staleInventories = fromInventory, stale
	overheads, err := r.runtimeClassOverheads(ctx, s.cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.pods, err = r.listPods(ctx, s.cluster); err != nil {
		return ctrl.Result{}, err
	}
	s.podsListed = true
	s.desired = buildDesired(s.cluster, fleet, overheads, s.gang, s.pods)
	if !s.desired.verdict.Fits {
		if err := r.judgeGrowth(ctx, s, fleet); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.reconcileChildren(ctx, s)
}

// namespaceTerminating says whether err (possibly joined or wrapped) is the
// API server refusing a create in a namespace being deleted.
func namespaceTerminating(err error) bool {
	var status *apierrors.StatusError
	if errors.As(err, &status) && apierrors.HasStatusCause(status, corev1.NamespaceTerminatingCause) {
		return true
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if namespaceTerminating(e) {
				return true
			}
		}
	}
	return false
}

// reconcileChildren runs the phases in order: the gang, the Service and the
// claim templates together, then the pods; a suspended cluster deletes its
// pods first and releases the gang after.
func (r *Reconciler) reconcileChildren(ctx context.Context, s *scope) (ctrl.Result, error) {
	if uid, ok := r.namespaceGone.Load(client.ObjectKeyFromObject(s.cluster)); ok && uid == s.cluster.UID {
		// Its namespace's deletion deletes the cluster too; status is
		// still written from what is observed.
		return ctrl.Result{}, nil
	}
	if s.cluster.Spec.Suspend {
		return r.suspend(ctx, s)
	}
	// The Service, the claim templates and the gang do not depend on one
	// another: one parallel round trip, not three in a row. The pods come
	// after all of them (a pod never exists before its PodGroup or the
	// templates its claims are made from).
	// A gang that waits for nodes is built like one that fits: its pods
	// are what makes the autoscaler add them.
	fits := s.desired.verdict.Fits || s.desired.verdict.Grows
	var serviceErr, claimsErr, gangErr error
	var wg sync.WaitGroup
	wg.Go(func() { serviceErr = r.reconcileService(ctx, s) })
	wg.Go(func() { claimsErr = r.reconcileClaimTemplates(ctx, s) })
	if fits {
		wg.Go(func() { gangErr = r.reconcileGang(ctx, s) })
	}
	wg.Wait()
	if serviceErr != nil || claimsErr != nil {
		return ctrl.Result{}, errors.Join(serviceErr, claimsErr, gangErr)
	}
	if !fits {
		// Nothing new is created for a gang that can never fit; existing
		// pods stay. Inventory, heartbeat and node changes re-trigger;
		// capacity counted from allocatable is also re-checked on a timer.
		if !s.fromInventory {
			return ctrl.Result{RequeueAfter: recheckCapacity}, nil
		}
		return ctrl.Result{}, nil
	}
	if err := gangErr; err != nil {
		switch {
		case errors.Is(err, scheduler.ErrNotInstalled):
			// A condition, not a crash loop: retry slowly in case the
			// scheduler's API (Volcano, the GenericWorkload gate) is
			// served later.
			return ctrl.Result{RequeueAfter: time.Minute}, nil
		case errors.Is(err, scheduler.ErrReleasing):
			// No pod joins a PodGroup being deleted. Pods of the old spec
			// still go: the old PodGroup goes only once they have. Its
			// deletion wakes us; the recheck is a fallback.
			return ctrl.Result{RequeueAfter: recheckConflict}, r.deleteOutdatedPods(ctx, s)
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.reconcilePods(ctx, s)
}

func (r *Reconciler) reconcileGang(ctx context.Context, s *scope) error {
	status, changed, err := s.gang.Ensure(ctx, r.client, s.cluster, s.desired.gang)
	if changed {
		r.metrics.PodGroupUpdated()
	}
	if err != nil {
		s.gangErr = err
		if errors.Is(err, scheduler.ErrNotInstalled) || errors.Is(err, scheduler.ErrReleasing) {
			return err
		}
		// A previous incarnation's PodGroup is the garbage collector's
		// to remove: waiting for it is no failure.
		if !namespaceTerminating(err) && !ownership.IsReplacing(err) {
			r.events.Eventf(s.cluster, nil, corev1.EventTypeWarning, "PodGroupFailed", "EnsurePodGroup", "%v", err)
		}
		return err
	}
	s.podGroup = status
	return nil
}

// suspend deletes the pods, then releases the gang once they are gone, so
// the queue's resources are freed for other gangs.
func (r *Reconciler) suspend(ctx context.Context, s *scope) (ctrl.Result, error) {
	if len(s.pods) > 0 {
		return ctrl.Result{}, r.deletePods(ctx, s, s.pods, "suspended")
	}
	if err := s.gang.Release(ctx, r.client, s.cluster); err != nil {
		return ctrl.Result{}, fmt.Errorf("releasing gang: %w", err)
	}
	return ctrl.Result{}, nil
}

// runtimeClassOverheads reads the pod overhead of each RuntimeClass the
// cluster's templates name: admission adds it to the pods, so the gang's
// minResources must count it.
func (r *Reconciler) runtimeClassOverheads(ctx context.Context, cluster *gpulabv1alpha1.GPUCluster) (map[string]corev1.ResourceList, error) {
	out := map[string]corev1.ResourceList{}
	templates := []*corev1.PodTemplateSpec{&cluster.Spec.Head.Template}
	for i := range cluster.Spec.WorkerGroups {
		templates = append(templates, &cluster.Spec.WorkerGroups[i].Template)
	}
	for _, t := range templates {
		name := t.Spec.RuntimeClassName
		if name == nil || *name == "" {
			continue
		}
		if _, done := out[*name]; done {
			continue
		}
		rc := &nodev1.RuntimeClass{}
		if err := r.client.Get(ctx, client.ObjectKey{Name: *name}, rc); err != nil {
			if apierrors.IsNotFound(err) {
				// Admission rejects the pods; the create error reports it.
				out[*name] = nil
				continue
			}
			return nil, fmt.Errorf("reading RuntimeClass %s: %w", *name, err)
		}
		if rc.Overhead != nil {
			out[*name] = rc.Overhead.PodFixed
		} else {
			out[*name] = nil
		}
	}
	return out, nil
}
