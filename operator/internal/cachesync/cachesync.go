// Package cachesync lets a reconcile read its own writes without waiting
// for the informer. A Client remembers every object this process created
// or updated, as the API server returned it, until the cache holds that
// version or a newer one; until then reads return the remembered copy.
//
// Waiting for the cache instead (polling after each write) held a
// reconcile worker for as long as the informer lagged, and informer lag
// grows with load, so throughput fell exactly when it was needed. Reading
// the newer copy costs nothing, and resourceVersions are comparable
// (k8s.io/apimachinery/pkg/util/resourceversion), so "newer" is exact.
package cachesync

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// TTL bounds how long a write is remembered. A remembered creation the
// cache never reports (someone deleted it before our informer saw it)
// would otherwise read as present forever; past TTL the cache is trusted.
const TTL = time.Minute

// Client is a client.Client whose reads overlay its own recent writes on
// the cache. Writes go to the wrapped client unchanged.
type Client struct {
	client.Client

	mu sync.Mutex
	// written is keyed by kind, then namespace/name, so a List looks only
	// at writes of its kind.
	written   map[schema.GroupVersionKind]map[types.NamespacedName]entry
	lastSweep time.Time
	now       func() time.Time
	// labelIndexes maps each kind's cache indexes to the label each holds
	// (LabelIndex): an index is the kind's, as in the cache.
	labelIndexes map[schema.GroupVersionKind]map[string]string
}

type entry struct {
	obj client.Object
	at  time.Time
}

// NewClient wraps c, usually a manager's cache-backed client.
func NewClient(c client.Client) *Client {
	return &Client{Client: c, written: map[schema.GroupVersionKind]map[types.NamespacedName]entry{}, now: time.Now, labelIndexes: map[schema.GroupVersionKind]map[string]string{}}
}

// LabelIndex registers a cache index of obj's kind that holds each
// object's value of label, so that a List selecting field=value (served
// from the index, not a scan of the namespace) still shows the objects
// written here and not cached yet whose label is value. Call it before
// the cache starts.
func (c *Client) LabelIndex(ctx context.Context, indexer client.FieldIndexer, obj client.Object, field, label string) error {
	if err := indexer.IndexField(ctx, obj, field, func(o client.Object) []string {
		if v, ok := o.GetLabels()[label]; ok {
			return []string{v}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing by label %s: %w", label, err)
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.labelIndexes[gvk] == nil {
		c.labelIndexes[gvk] = map[string]string{}
	}
	c.labelIndexes[gvk][field] = label
	return nil
}

// labelSelectorFor turns a field selector of exact matches on gvk's label
// indexes into the label selector it stands for, added to selector; false
// when it selects on anything else.
func (c *Client) labelSelectorFor(gvk schema.GroupVersionKind, fs fields.Selector, selector labels.Selector) (labels.Selector, bool) {
	if selector == nil {
		selector = labels.Everything()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range fs.Requirements() {
		label, ok := c.labelIndexes[gvk][r.Field]
		if !ok || (r.Operator != selection.Equals && r.Operator != selection.DoubleEquals) {
			return nil, false
		}
		req, err := labels.NewRequirement(label, selection.Equals, []string{r.Value})
		if err != nil {
			return nil, false
		}
		selector = selector.Add(*req)
	}
	return selector, true
}

// Track follows the informers of the kinds this client writes, so a
// remembered write is forgotten as soon as the cache holds it, a newer
// version, or its deletion. Without it a remembered creation that someone
// deleted would read as present until TTL. Call it before the cache
// starts (from SetupWithManager).
func (c *Client) Track(ctx context.Context, informers cache.Informers, objs ...client.Object) error {
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, c.Scheme())
		if err != nil {
			return err
		}
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %s for cachesync: %w", gvk.Kind, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { c.observed(gvk, o, false) },
			UpdateFunc: func(_, o any) { c.observed(gvk, o, false) },
			DeleteFunc: func(o any) { c.observed(gvk, o, true) },
		}); err != nil {
			return fmt.Errorf("watching %s for cachesync: %w", gvk.Kind, err)
		}
	}
	return nil
}

// observed forgets the write of an object the cache now holds at the
// remembered version or later, or has seen deleted.
func (c *Client) observed(gvk schema.GroupVersionKind, o any, deleted bool) {
	if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o, deleted = tomb.Obj, true
	}
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	id := client.ObjectKeyFromObject(obj)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.written[gvk][id]
	if !ok {
		return
	}
	if deleted {
		delete(c.written[gvk], id)
		return
	}
	if cmp, err := resourceversion.CompareResourceVersion(e.obj.GetResourceVersion(), obj.GetResourceVersion()); err != nil || cmp <= 0 {
		delete(c.written[gvk], id)
	}
}

// Get reads from the cache; a remembered write newer than the cached copy,
// or not in the cache yet, is returned instead.
func (c *Client) Get(ctx context.Context, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := c.Client.Get(ctx, k, obj, opts...)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	gvk, gvkErr := apiutil.GVKForObject(obj, c.Scheme())
	if gvkErr != nil {
		return err
	}
	var cached client.Object
	if err == nil {
		cached = obj
	}
	if w := c.newer(gvk, k, cached); w != nil && assign(obj, w) {
		return nil
	}
	return err
}

// List reads from the cache, replaces items with newer remembered writes
// and adds remembered creations the cache does not hold yet that match
// the namespace and label selector. With a field selector only
// replacements are made: the index is the cache's to evaluate.
func (c *Client) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(list, c.Scheme())
	if err != nil || !strings.HasSuffix(gvk.Kind, "List") {
		return nil
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	if !c.remembers(gvk) {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	seen := map[types.NamespacedName]bool{}
	changed := false
	for i, item := range items {
		o, ok := item.(client.Object)
		if !ok {
			return nil
		}
		id := client.ObjectKeyFromObject(o)
		seen[id] = true
		if w := c.newer(gvk, id, o); w != nil {
			items[i], changed = w, true
		}
	}
	selector, overlay := lo.LabelSelector, true
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		// Only an index that stands for a label can be checked here.
		selector, overlay = c.labelSelectorFor(gvk, lo.FieldSelector, lo.LabelSelector)
	}
	if overlay {
		for _, w := range c.unseen(gvk, lo.Namespace, selector, seen) {
			items, changed = append(items, w), true
		}
	}
	if !changed {
		return nil
	}
	if err := meta.SetList(list, items); err != nil {
		return err
	}
	return nil
}

// Create creates obj and remembers what the API server returned.
func (c *Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := c.Client.Create(ctx, obj, opts...)
	if err == nil {
		c.remember(obj)
	}
	return err
}

// Update updates obj and remembers what the API server returned.
func (c *Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := c.Client.Update(ctx, obj, opts...)
	if err == nil {
		c.remember(obj)
	}
	return err
}

// Patch patches obj and remembers what the API server returned.
func (c *Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := c.Client.Patch(ctx, obj, patch, opts...)
	if err == nil {
		c.remember(obj)
	}
	return err
}

// Delete forgets the object: what the cache says next is the truth.
func (c *Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	err := c.Client.Delete(ctx, obj, opts...)
	if gvk, gvkErr := apiutil.GVKForObject(obj, c.Scheme()); gvkErr == nil {
		c.mu.Lock()
		delete(c.written[gvk], client.ObjectKeyFromObject(obj))
		c.mu.Unlock()
	}
	return err
}

// Status remembers status writes too.
func (c *Client) Status() client.SubResourceWriter {
	return &statusWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type statusWriter struct {
	client.SubResourceWriter
	c *Client
}

func (s *statusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	err := s.SubResourceWriter.Update(ctx, obj, opts...)
	if err == nil {
		s.c.remember(obj)
	}
	return err
}

func (s *statusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	if err == nil {
		s.c.remember(obj)
	}
	return err
}

func (c *Client) remember(obj client.Object) {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil || obj.GetResourceVersion() == "" {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written[gvk] == nil {
		c.written[gvk] = map[types.NamespacedName]entry{}
	}
	c.written[gvk][client.ObjectKeyFromObject(obj)] = entry{obj: obj.DeepCopyObject().(client.Object), at: now}
	if now.Sub(c.lastSweep) > TTL {
		// Objects never read again (deleted with their owner) go here.
		for _, byName := range c.written {
			for k, e := range byName {
				if now.Sub(e.at) > TTL {
					delete(byName, k)
				}
			}
		}
		c.lastSweep = now
	}
}

// newer returns a copy of the remembered write of id when it is newer than
// cached (nil: not in the cache), and forgets the write once the cache has
// caught up with it.
func (c *Client) newer(gvk schema.GroupVersionKind, id types.NamespacedName, cached client.Object) client.Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.written[gvk][id]
	if !ok {
		return nil
	}
	if c.now().Sub(e.at) > TTL {
		delete(c.written[gvk], id)
		return nil
	}
	if cached != nil {
		cmp, err := resourceversion.CompareResourceVersion(e.obj.GetResourceVersion(), cached.GetResourceVersion())
		if err != nil || cmp <= 0 {
			// Caught up, or versions we cannot order: the cache wins.
			delete(c.written[gvk], id)
			return nil
		}
	}
	return e.obj.DeepCopyObject().(client.Object)
}

func (c *Client) remembers(gvk schema.GroupVersionKind) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.written[gvk]) > 0
}

// unseen are the remembered writes of gvk the list lacks that it would
// hold by namespace and labels.
func (c *Client) unseen(gvk schema.GroupVersionKind, namespace string, selector labels.Selector, seen map[types.NamespacedName]bool) []runtime.Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []runtime.Object
	for k, e := range c.written[gvk] {
		switch {
		case seen[k]:
		case namespace != "" && k.Namespace != namespace:
		case selector != nil && !selector.Matches(labels.Set(e.obj.GetLabels())):
		case c.now().Sub(e.at) > TTL:
		default:
			out = append(out, e.obj.DeepCopyObject())
		}
	}
	return out
}

// assign copies src into dst when both are the same Go type.
func assign(dst, src client.Object) bool {
	d, s := reflect.ValueOf(dst), reflect.ValueOf(src)
	if d.Type() != s.Type() || d.Kind() != reflect.Pointer {
		return false
	}
	d.Elem().Set(s.Elem())
	return true
}
