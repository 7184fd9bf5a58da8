package bare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A gang's status, as the floor writes it on the gang's ConfigMap: a
// ConfigMap has no status subresource, so two data keys say it.
const (
	// StatusKey holds StatusReady once every one of the gang's pods is
	// Ready: the floor's one status write per gang, as an operator's Ready.
	StatusKey = "status"
	// StatusReady is the only status the floor writes.
	StatusReady = "Ready"
	// ReadyTimeKey is when the floor saw the pods all Ready and wrote the
	// status, in RFC 3339 to the second, as a condition's
	// lastTransitionTime is.
	ReadyTimeKey = "readyTime"
)

// Status says whether a gang's ConfigMap says Ready, and since when (zero
// when the time is missing or unreadable).
func Status(cm *corev1.ConfigMap) (ready bool, since time.Time) {
	if cm.Data[StatusKey] != StatusReady {
		return false, time.Time{}
	}
	since, err := time.Parse(time.RFC3339, cm.Data[ReadyTimeKey])
	if err != nil {
		return true, time.Time{}
	}
	return true, since
}

// FloorInput configures StartFloor.
type FloorInput struct {
	// Config reaches the API server, for the watch of the namespace's
	// pods. Required.
	Config *rest.Config
	// Scheme knows core and Volcano's scheduling types. Required.
	Scheme *runtime.Scheme
	// Namespace is where the gangs are. Required.
	Namespace string
	// Client creates the gangs' children and writes their statuses
	// (Client with Unlimited: the floor's own limits must not be what
	// it measures). Required.
	Client client.Client
}

// Floor is the ideal operator of one namespace's bare gangs: it reacts to
// each gang at once, with no bound on how many it serves together, and
// does the least an operator must. Created makes a gang's children on
// the caller's goroutine (one per gang: cleanup.CreateAll runs each
// reaction on its own, outside the create slots), and one watch of the
// namespace's pods finds each gang whose pods are all Ready, whose
// ConfigMap it then writes once (StatusKey), as an operator writes Ready.
type Floor struct {
	c      client.Client
	ns     string
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	gangs  map[types.UID]*floorGang
	errs   []error
	writes sync.WaitGroup
}

// floorGang is what the floor knows of one gang.
type floorGang struct {
	name    string
	desired int             // 0 until Created: the floor writes only for gangs it made
	ready   map[string]bool // its pods by name: Ready or not
	written bool            // the status write is issued; never again
}

// StartFloor starts watching in.Namespace's pods; Stop ends it.
func StartFloor(ctx context.Context, in FloorInput) (*Floor, error) {
	if in.Config == nil || in.Scheme == nil || in.Namespace == "" || in.Client == nil {
		return nil, fmt.Errorf("bare floor: a config, a scheme, a namespace and a client are required")
	}
	c, err := cache.New(in.Config, cache.Options{Scheme: in.Scheme, DefaultNamespaces: map[string]cache.Config{in.Namespace: {}}})
	if err != nil {
		return nil, fmt.Errorf("bare floor: %w", err)
	}
	f := &Floor{c: in.Client, ns: in.Namespace, gangs: map[types.UID]*floorGang{}}
	f.ctx, f.cancel = context.WithCancel(ctx)
	inf, err := c.GetInformer(f.ctx, &corev1.Pod{})
	if err != nil {
		f.cancel()
		return nil, fmt.Errorf("bare floor: watching pods: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { f.pod(o, false) },
		UpdateFunc: func(_, o any) { f.pod(o, false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			f.pod(o, true)
		},
	})
	if err != nil {
		f.cancel()
		return nil, fmt.Errorf("bare floor: watching pods: %w", err)
	}
	go func() { _ = c.Start(f.ctx) }()
	if !c.WaitForCacheSync(f.ctx) {
		f.cancel()
		return nil, fmt.Errorf("bare floor: the pod watch of %s did not sync", in.Namespace)
	}
	return f, nil
}

// Stop ends the watch and waits for the status writes in flight.
func (f *Floor) Stop() {
	f.cancel()
	f.writes.Wait()
}

// Created reacts to a gang's created ConfigMap: it makes the gang's
// children (Create: the PodGroup before any pod) and from then on writes
// its status once its pods are all Ready.
func (f *Floor) Created(ctx context.Context, cm *corev1.ConfigMap) error {
	ch, err := ChildrenOf(cm)
	if err != nil {
		return err
	}
	f.mu.Lock()
	g := f.gang(cm.UID, cm.Name)
	g.desired = DesiredPods(cm)
	f.mu.Unlock()
	if err := Create(ctx, f.c, ch); err != nil {
		return fmt.Errorf("gang %s: %w", cm.Name, err)
	}
	return nil
}

// Err is every status write that failed so far.
func (f *Floor) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// Progress is how many of the gang's pods the floor has seen Ready, how
// many it waits for (0 for a gang it did not make) and whether it wrote
// the gang's status.
func (f *Floor) Progress(gang string) (ready, desired int, written bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.gangs {
		if g.name == gang && g.desired > 0 {
			return count(g.ready), g.desired, g.written
		}
	}
	return 0, 0, false
}

func (f *Floor) gang(uid types.UID, name string) *floorGang {
	g, ok := f.gangs[uid]
	if !ok {
		g = &floorGang{name: name, ready: map[string]bool{}}
		f.gangs[uid] = g
	}
	return g
}

// pod applies one pod event to its gang.
func (f *Floor) pod(o any, gone bool) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "ConfigMap" || ref.APIVersion != "v1" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gang(ref.UID, ref.Name)
	if gone || !p.DeletionTimestamp.IsZero() {
		delete(g.ready, p.Name)
		return
	}
	g.ready[p.Name] = podReady(p)
	f.maybeWrite(ref.UID, g)
}

// maybeWrite issues the gang's status write, on a goroutine of its own,
// the first time every pod it asks for is Ready. f.mu is held.
func (f *Floor) maybeWrite(uid types.UID, g *floorGang) {
	if g.written || g.desired == 0 || count(g.ready) < g.desired {
		return
	}
	g.written = true
	f.writes.Go(func() {
		if err := f.write(uid, g.name, time.Now()); err != nil {
			f.mu.Lock()
			f.errs = append(f.errs, err)
			f.mu.Unlock()
		}
	})
}

// write sets the gang's status Ready, on the ConfigMap of that UID only.
func (f *Floor) write(uid types.UID, name string, at time.Time) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"data":     map[string]string{StatusKey: StatusReady, ReadyTimeKey: at.UTC().Format(time.RFC3339)},
	})
	if err != nil {
		return fmt.Errorf("gang %s's status: %w", name, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	if err := f.c.Patch(f.ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) && f.ctx.Err() == nil {
		return fmt.Errorf("writing gang %s's status: %w", name, err)
	}
	return nil
}

func count(ready map[string]bool) int {
	n := 0
	for _, r := range ready {
		if r {
			n++
		}
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
