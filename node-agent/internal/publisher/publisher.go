package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
)

// DefaultFieldManager is the agent's server-side apply field manager.
const DefaultFieldManager = "gpulab-agent"

// Object names for metrics and errors.
const (
	ObjectInventory = "inventory"
	ObjectLabels    = "labels"
	ObjectCapacity  = "capacity"
	ObjectLease     = "lease"
)

// Options configures a Publisher.
type Options struct {
	// FieldManager owns the applied fields. Defaults to DefaultFieldManager.
	FieldManager string
	// LabelNode applies GFD-compatible labels to the node. Defaults to false.
	LabelNode bool
	// AdvertiseCapacity sets the node's nvidia.com/gpu capacity and
	// allocatable to the healthy GPU count, as the device plugin would. For
	// testbeds whose nodes have no device plugin. Defaults to false.
	AdvertiseCapacity bool
	// ResyncPeriod re-applies unchanged objects this long after their last
	// write, so that an inventory someone deleted, or labels someone edited,
	// come back. The API server does not persist a no-op apply. Defaults to
	// 10m; negative disables.
	ResyncPeriod time.Duration
	// HeartbeatPeriod renews the node's heartbeat Lease this often after
	// the last write of Lease or GPUInventory, so the operator can tell a
	// live agent from a dead one. The GPUInventory is written only when it
	// changes (and every ResyncPeriod), with status.heartbeatTime and this
	// period as status.heartbeatSeconds. Defaults to 1m; negative disables.
	HeartbeatPeriod time.Duration
	// LeaseNamespace holds the heartbeat Leases. Defaults to
	// v1alpha1.DefaultHeartbeatLeaseNamespace.
	LeaseNamespace string
	// Metrics counts writes; nil counts nothing.
	Metrics *metrics.Metrics
}

// State is what the agent wants published for one node.
type State struct {
	// Status is the GPUInventory status.
	Status v1alpha1.GPUInventoryStatus
	// Labels are the node's GFD labels (applied when Options.LabelNode).
	Labels map[string]string
	// KeepLabels leaves the node's labels as they are, whatever Labels
	// says: no scan has succeeded yet, so the labels are not known.
	KeepLabels bool
	// Healthy is the healthy GPU count (advertised when
	// Options.AdvertiseCapacity).
	Healthy int
}

// Publisher applies States. It is safe for concurrent use by the agents of
// different nodes.
type Publisher struct {
	c    client.WithWatch
	opts Options

	mu   sync.Mutex
	last map[string]*written
}

// written is what was last applied for a node.
type written struct {
	owner    *metav1.OwnerReference
	status   *v1alpha1.GPUInventoryStatus
	labels   map[string]string
	capacity *int
	// lease is the heartbeat Lease as last written, so a renewal is one
	// update, without a read first.
	lease *coordinationv1.Lease
	// at is when each object was last applied.
	at map[string]time.Time
	// ownerChanged means the Node's UID changed during a Publish: what it
	// wrote before names a dead owner and is written again.
	ownerChanged bool
}

// reown records the Node's current UID; a new one drops what was written,
// so that everything is written again with it.
func (w *written) reown(owner *metav1.OwnerReference) {
	if w.owner != nil && w.owner.UID == owner.UID {
		return
	}
	*w = written{owner: owner, at: map[string]time.Time{}, ownerChanged: true}
}

// refreshOwner reads the Node again: something written under its name is
// gone, which the garbage collector does once the Node it names is deleted.
func (p *Publisher) refreshOwner(ctx context.Context, node string, w *written) error {
	owner, err := p.nodeOwner(ctx, node)
	if err != nil {
		return err
	}
	w.reown(owner)
	return nil
}

// NewScheme returns a scheme of what a Publisher reads and writes, for its
// client.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(coordinationv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// New returns a Publisher writing through c, whose scheme must know what
// NewScheme's does. It watches through c too (one GPUInventory
// per agent, for clear-health requests).
func New(c client.WithWatch, opts Options) *Publisher {
	if opts.FieldManager == "" {
		opts.FieldManager = DefaultFieldManager
	}
	if opts.ResyncPeriod == 0 {
		opts.ResyncPeriod = 10 * time.Minute
	}
	if opts.HeartbeatPeriod == 0 {
		opts.HeartbeatPeriod = time.Minute
	}
	if opts.LeaseNamespace == "" {
		opts.LeaseNamespace = v1alpha1.DefaultHeartbeatLeaseNamespace
	}
	return &Publisher{c: c, opts: opts, last: map[string]*written{}}
}

// Load returns the status currently stored for node, nil when there is none,
// so that an agent restart keeps the published times.
func (p *Publisher) Load(ctx context.Context, node string) (*v1alpha1.GPUInventoryStatus, error) {
	var inv v1alpha1.GPUInventory
	if err := p.c.Get(ctx, client.ObjectKey{Name: node}, &inv); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading GPUInventory %s: %w", node, err)
	}
	return &inv.Status, nil
}

// WatchClearHealth calls f with the value of node's
// v1alpha1.ClearHealthAnnotation ("" without one) on every change of the
// node's GPUInventory, until ctx is done. It watches that one object, so an
// idle node costs the API server no requests.
func (p *Publisher) WatchClearHealth(ctx context.Context, node string, f func(value string)) error {
	sel := fields.OneTermEqualSelector("metadata.name", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			var l v1alpha1.GPUInventoryList
			err := p.c.List(ctx, &l, &client.ListOptions{Raw: &o})
			return &l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return p.c.Watch(ctx, &v1alpha1.GPUInventoryList{}, &client.ListOptions{Raw: &o})
		},
	}
	value := func(obj any) string {
		if inv, ok := obj.(*v1alpha1.GPUInventory); ok {
			return inv.Annotations[v1alpha1.ClearHealthAnnotation]
		}
		return ""
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &v1alpha1.GPUInventory{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { f(value(obj)) },
			UpdateFunc: func(_, obj any) { f(value(obj)) },
			DeleteFunc: func(any) {
				// Deleted by someone, or by the garbage collector because the
				// Node it names is gone: write it all again, owner re-read.
				p.Forget(node)
				f("")
			},
		},
	})
	informer.RunWithContext(ctx)
	return nil
}

// ClearHealthDone removes node's v1alpha1.ClearHealthAnnotation if it still
// holds value; a value someone changed meanwhile is a new request and stays.
func (p *Publisher) ClearHealthDone(ctx context.Context, node, value string) error {
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(v1alpha1.ClearHealthAnnotation)
	patch, err := json.Marshal([]map[string]string{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return fmt.Errorf("encoding patch: %w", err)
	}
	inv := &v1alpha1.GPUInventory{ObjectMeta: metav1.ObjectMeta{Name: node}}
	err = p.c.Patch(ctx, inv, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(p.opts.FieldManager))
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	// A failed test is a changed or removed annotation: nothing to remove.
	var cur v1alpha1.GPUInventory
	if gerr := p.c.Get(ctx, client.ObjectKey{Name: node}, &cur); gerr == nil && cur.Annotations[v1alpha1.ClearHealthAnnotation] != value {
		return nil
	}
	return fmt.Errorf("removing annotation %s from GPUInventory %s: %w", v1alpha1.ClearHealthAnnotation, node, err)
}

// Forget drops what was written for node, so the next Publish writes it all.
func (p *Publisher) Forget(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, node)
}

func (p *Publisher) state(node string) *written {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.last[node]
	if !ok {
		w = &written{at: map[string]time.Time{}}
		p.last[node] = w
	}
	return w
}

// Publish applies whatever part of s differs from what was last applied for
// node. Calls for one node must not overlap.
//
// The Node owns what is written. A Node deleted and registered again under
// the same name has a new UID, and the garbage collector deletes whatever
// names the old one: when a write shows another UID, or that an object
// written before is gone, Publish reads the Node again and, if its UID
// changed, writes everything again with the new owner.
func (p *Publisher) Publish(ctx context.Context, node string, s State) error {
	w := p.state(node)
	if w.owner == nil {
		owner, err := p.nodeOwner(ctx, node)
		if err != nil {
			return err
		}
		w.owner = owner
	}
	err := p.write(ctx, node, w, s)
	if !w.ownerChanged {
		return err
	}
	w.ownerChanged = false
	return p.write(ctx, node, w, s)
}

// write applies what differs from w.
func (p *Publisher) write(ctx context.Context, node string, w *written, s State) error {
	var errs []error
	if w.status == nil || !equality.Semantic.DeepEqual(*w.status, s.Status) || p.due(w, ObjectInventory) {
		err := p.count(w, ObjectInventory, p.applyInventory(ctx, node, w.owner, &s.Status))
		if err == nil {
			w.status = s.Status.DeepCopy()
		}
		errs = append(errs, err)
	}
	if p.opts.LabelNode && !s.KeepLabels && (w.labels == nil || !maps.Equal(w.labels, s.Labels) || p.due(w, ObjectLabels)) {
		// Labels name no owner: written, they stay so after a new owner.
		err := p.count(w, ObjectLabels, p.applyLabels(ctx, node, w, s.Labels))
		if err == nil {
			w.labels = maps.Clone(s.Labels)
			if w.labels == nil {
				w.labels = map[string]string{}
			}
		}
		errs = append(errs, err)
	}
	if p.opts.AdvertiseCapacity && (w.capacity == nil || *w.capacity != s.Healthy || p.due(w, ObjectCapacity)) {
		err := p.count(w, ObjectCapacity, p.applyCapacity(ctx, node, w, s.Healthy))
		if err == nil {
			h := s.Healthy
			w.capacity = &h
		}
		errs = append(errs, err)
	}
	// An inventory written now is a heartbeat of its own.
	if p.heartbeatDue(w) && !w.ownerChanged {
		err := p.renewLease(ctx, node, w)
		if !w.ownerChanged { // else it wrote nothing: Publish writes again
			errs = append(errs, p.count(w, ObjectLease, err))
		}
	}
	return errors.Join(errs...)
}

// heartbeatDue reports whether a heartbeat is due: a period since the
// inventory or the Lease was last written.
func (p *Publisher) heartbeatDue(w *written) bool {
	last := w.at[ObjectInventory]
	if at := w.at[ObjectLease]; at.After(last) {
		last = at
	}
	return p.opts.HeartbeatPeriod > 0 && time.Since(last) >= p.opts.HeartbeatPeriod
}

// renewLease writes the node's heartbeat Lease: one update of the Lease as
// last written, or, the first time and after a conflict, a read and then a
// create or an update. A Lease of that name without HeartbeatLeaseLabel is
// someone else's and stays untouched.
func (p *Publisher) renewLease(ctx context.Context, node string, w *written) error {
	now := metav1.NewMicroTime(time.Now())
	renewed := w.lease != nil
	if renewed {
		l := w.lease.DeepCopy()
		l.Spec.RenewTime = &now
		err := p.c.Update(ctx, l, client.FieldOwner(p.opts.FieldManager))
		if err == nil {
			w.lease = l
			return nil
		}
		w.lease = nil
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("renewing heartbeat Lease %s/%s: %w", p.opts.LeaseNamespace, node, err)
		}
	}
	key := client.ObjectKey{Namespace: p.opts.LeaseNamespace, Name: node}
	var l coordinationv1.Lease
	err := p.c.Get(ctx, key, &l)
	if renewed && apierrors.IsNotFound(err) {
		// The Lease renewed before was deleted, as the garbage collector
		// does after its Node's deletion: is the Node another one now?
		if err := p.refreshOwner(ctx, node, w); err != nil {
			return fmt.Errorf("heartbeat Lease %s was deleted: %w", key, err)
		}
		if w.ownerChanged {
			return nil // Publish writes everything again, the Lease too
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{v1alpha1.HeartbeatLeaseLabel: "true"}, OwnerReferences: []metav1.OwnerReference{*w.owner}}}
		p.leaseSpec(&l, node, now)
		if err := p.c.Create(ctx, &l, client.FieldOwner(p.opts.FieldManager)); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("creating heartbeat Lease %s: namespace %s does not exist (the agent's --lease-namespace and the operator's --agent-lease-namespace must name it): %w",
					key, key.Namespace, err)
			}
			return fmt.Errorf("creating heartbeat Lease %s: %w", key, err)
		}
	case err != nil:
		return fmt.Errorf("reading heartbeat Lease %s: %w", key, err)
	case l.Labels[v1alpha1.HeartbeatLeaseLabel] != "true":
		return fmt.Errorf("lease %s is not an agent heartbeat (no %s=true label): not renewing someone else's Lease", key, v1alpha1.HeartbeatLeaseLabel)
	default:
		p.leaseSpec(&l, node, now)
		// Written before the Node registered again, it may name a dead one.
		l.OwnerReferences = ownerRefs(l.OwnerReferences, w.owner)
		if err := p.c.Update(ctx, &l, client.FieldOwner(p.opts.FieldManager)); err != nil {
			return fmt.Errorf("renewing heartbeat Lease %s: %w", key, err)
		}
	}
	w.lease = &l
	return nil
}

// ownerRefs are refs with every Node owner replaced by owner.
func ownerRefs(refs []metav1.OwnerReference, owner *metav1.OwnerReference) []metav1.OwnerReference {
	out := []metav1.OwnerReference{*owner}
	for _, r := range refs {
		if r.Kind != "Node" || r.APIVersion != "v1" {
			out = append(out, r)
		}
	}
	return out
}

// leaseSpec fills in a heartbeat: the Lease lasts v1alpha1.StaleHeartbeats
// periods, the operator's rule for an inventory's own heartbeats.
func (p *Publisher) leaseSpec(l *coordinationv1.Lease, node string, now metav1.MicroTime) {
	l.Spec.HolderIdentity = &node
	seconds := v1alpha1.StaleHeartbeats * p.heartbeatSeconds()
	l.Spec.LeaseDurationSeconds = &seconds
	l.Spec.RenewTime = &now
}

func (p *Publisher) heartbeatSeconds() int32 {
	return int32(max(p.opts.HeartbeatPeriod/time.Second, 1))
}

// due reports whether an unchanged object should be applied again.
func (p *Publisher) due(w *written, object string) bool {
	return p.opts.ResyncPeriod > 0 && time.Since(w.at[object]) > p.opts.ResyncPeriod
}

// count records a write's outcome in the metrics and, on success, its time.
func (p *Publisher) count(w *written, object string, err error) error {
	if err == nil {
		w.at[object] = time.Now()
	}
	if p.opts.Metrics != nil {
		if err != nil {
			p.opts.Metrics.WriteErrors.WithLabelValues(object).Inc()
		} else {
			p.opts.Metrics.Writes.WithLabelValues(object).Inc()
		}
	}
	return err
}

// nodeOwner makes the Node own its inventory, so that deleting the node
// deletes the inventory. The agent must not create nodes, so a node that
// does not exist is an error.
func (p *Publisher) nodeOwner(ctx context.Context, node string) (*metav1.OwnerReference, error) {
	var n metav1.PartialObjectMetadata
	n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := p.c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", node, err)
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: n.UID}, nil
}

func (p *Publisher) applyInventory(ctx context.Context, node string, owner *metav1.OwnerReference, st *v1alpha1.GPUInventoryStatus) error {
	inv := &v1alpha1.GPUInventory{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUInventory"},
		ObjectMeta: metav1.ObjectMeta{Name: node, OwnerReferences: []metav1.OwnerReference{*owner}},
		Status:     *st.DeepCopy(),
	}
	if p.opts.HeartbeatPeriod > 0 {
		now := metav1.Now()
		inv.Status.HeartbeatTime = &now
		inv.Status.HeartbeatSeconds = p.heartbeatSeconds()
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(inv)
	if err != nil {
		return fmt.Errorf("encoding GPUInventory %s: %w", node, err)
	}
	// The zero creationTimestamp encodes as null, which is not ours to set.
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	ac := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: obj})
	if err := p.c.Apply(ctx, ac, client.FieldOwner(p.opts.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying GPUInventory %s: %w", node, err)
	}
	return nil
}

func (p *Publisher) applyLabels(ctx context.Context, node string, w *written, labels map[string]string) error {
	ac := corev1ac.Node(node).WithLabels(labels)
	if err := p.c.Apply(ctx, ac, client.FieldOwner(p.opts.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying labels to node %s: %w", node, err)
	}
	p.sawNode(ac, w)
	return nil
}

func (p *Publisher) applyCapacity(ctx context.Context, node string, w *written, healthy int) error {
	q := *resource.NewQuantity(int64(healthy), resource.DecimalSI)
	rl := corev1.ResourceList{gfd.GPUResource: q}
	ac := corev1ac.Node(node).WithStatus(corev1ac.NodeStatus().WithCapacity(rl).WithAllocatable(rl))
	if err := p.c.Status().Apply(ctx, ac, client.FieldOwner(p.opts.FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("advertising %s on node %s: %w", gfd.GPUResource, node, err)
	}
	p.sawNode(ac, w)
	return nil
}

// sawNode takes the Node's UID from an apply's answer, which costs no read:
// another one than the owner's means the Node registered again.
func (p *Publisher) sawNode(ac *corev1ac.NodeApplyConfiguration, w *written) {
	if ac.UID == nil || *ac.UID == "" {
		return
	}
	w.reown(&metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: *ac.Name, UID: *ac.UID})
}
