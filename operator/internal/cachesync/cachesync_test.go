package cachesync

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	pollpkg "github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		e, err := envtest.Start(context.Background(), envtest.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		env = e
	}
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cachesync-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

func newCluster(ns string) *gpulabv1alpha1.GPUCluster {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	return &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"},
		Spec: gpulabv1alpha1.GPUClusterSpec{Head: gpulabv1alpha1.HeadSpec{Template: tmpl},
			WorkerGroups: []gpulabv1alpha1.WorkerGroupSpec{{Name: "workers", Replicas: 1, Template: tmpl}}}}
}

// lagging is a client whose writes reach the real API server and whose
// reads come from a snapshot taken when the test says: an informer cache
// that has not caught up, made deterministic.
type lagging struct {
	client.Client
	snapshot map[types.NamespacedName]client.Object
}

// freeze copies the API server's current objects into the snapshot.
func (l *lagging) freeze(t *testing.T, ctx context.Context, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		fresh := o.DeepCopyObject().(client.Object)
		if err := l.Client.Get(ctx, client.ObjectKeyFromObject(o), fresh); err != nil {
			t.Fatal(err)
		}
		l.snapshot[client.ObjectKeyFromObject(o)] = fresh
	}
}

func (l *lagging) Get(_ context.Context, k client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	o, ok := l.snapshot[k]
	if !ok || !assign(obj, o.DeepCopyObject().(client.Object)) {
		return apierrors.NewNotFound(corev1.Resource("pods"), k.Name)
	}
	return nil
}

func (l *lagging) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	pods := list.(*corev1.PodList)
	for _, o := range l.snapshot {
		if p, ok := o.(*corev1.Pod); ok && (lo.Namespace == "" || p.Namespace == lo.Namespace) &&
			(lo.LabelSelector == nil || lo.LabelSelector.Matches(labels.Set(p.Labels))) {
			pods.Items = append(pods.Items, *p.DeepCopy())
		}
	}
	return nil
}

func newLagging(t *testing.T) (*Client, *lagging, string) {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	l := &lagging{Client: env.Client, snapshot: map[types.NamespacedName]client.Object{}}
	return NewClient(l), l, newNamespace(t)
}

func TestReadsItsOwnStatusWrite(t *testing.T) {
	ctx := t.Context()
	c, l, ns := newLagging(t)
	cluster := newCluster(ns)
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	l.freeze(t, ctx, cluster)

	cluster.Status.Phase = gpulabv1alpha1.ClusterReady
	if err := c.Status().Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	got := &gpulabv1alpha1.GPUCluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != gpulabv1alpha1.ClusterReady || got.ResourceVersion != cluster.ResourceVersion {
		t.Fatalf("read phase %q at %s behind a lagging cache, want our write: %q at %s",
			got.Status.Phase, got.ResourceVersion, gpulabv1alpha1.ClusterReady, cluster.ResourceVersion)
	}
	// A read of the stale copy must not have been changed through ours.
	got.Status.Phase = gpulabv1alpha1.ClusterFailed
	again := &gpulabv1alpha1.GPUCluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), again); err != nil || again.Status.Phase != gpulabv1alpha1.ClusterReady {
		t.Fatalf("a caller's change leaked into the remembered write: %q, %v", again.Status.Phase, err)
	}

	// Someone else writes after us; once the cache holds that, it wins.
	other := cluster.DeepCopy()
	other.Labels = map[string]string{"edited": "by-someone-else"}
	if err := env.Client.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	l.freeze(t, ctx, cluster)
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), again); err != nil {
		t.Fatal(err)
	}
	if again.Labels["edited"] != "by-someone-else" {
		t.Fatalf("an older remembered write hid a newer cached object: labels %v", again.Labels)
	}
}

func TestListsPodsItCreated(t *testing.T) {
	ctx := t.Context()
	c, l, ns := newLagging(t)
	mine := map[string]string{gpulabv1alpha1.ClusterLabel: "a"}
	pod := func(ns, name string, lbls map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	}
	old := pod(ns, "a-0", mine)
	if err := env.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	l.freeze(t, ctx, old)
	otherNS := newNamespace(t)
	for _, p := range []*corev1.Pod{pod(ns, "a-1", mine), pod(ns, "b-0", map[string]string{gpulabv1alpha1.ClusterLabel: "b"}), pod(otherNS, "a-1", mine)} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	names := func(opts ...client.ListOption) []string {
		t.Helper()
		var list corev1.PodList
		if err := c.List(ctx, &list, opts...); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range list.Items {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		return out
	}
	got := names(client.InNamespace(ns), client.MatchingLabels(mine))
	if len(got) != 2 || !slices.Contains(got, ns+"/a-0") || !slices.Contains(got, ns+"/a-1") {
		t.Fatalf("listed %v, want the cached a-0 and the created a-1 of %s only", got, ns)
	}
	if got := names(client.InNamespace(ns), client.MatchingFields{"spec.nodeName": ""}); slices.Contains(got, ns+"/a-1") {
		t.Errorf("a field-selected list gained an object the index never saw: %v", got)
	}
	// An index that holds the cluster label stands for that label: the
	// pods created here and not cached yet are listed by it too. (The
	// lagging reader ignores field selectors: the cached a-0 is there.)
	indexer := &recordingIndexer{}
	if err := c.LabelIndex(ctx, indexer, &corev1.Pod{}, "by-cluster", gpulabv1alpha1.ClusterLabel); err != nil {
		t.Fatal(err)
	}
	if v := indexer.fn(pod(ns, "x", mine)); len(v) != 1 || v[0] != "a" {
		t.Errorf("the index holds %v for a pod labelled a", v)
	}
	got = names(client.InNamespace(ns), client.MatchingFields{"by-cluster": "a"})
	if !slices.Contains(got, ns+"/a-1") || slices.Contains(got, ns+"/b-0") {
		t.Errorf("listed by the label index %v, want the created a-1 and not b-0", got)
	}

	// Deleting forgets the write: the cache is the truth again.
	if err := c.Delete(ctx, pod(ns, "a-1", mine)); err != nil {
		t.Fatal(err)
	}
	if got := names(client.InNamespace(ns), client.MatchingLabels(mine)); slices.Contains(got, ns+"/a-1") {
		t.Errorf("a deleted pod still listed: %v", got)
	}
}

// recordingIndexer keeps the function an index is registered with.
type recordingIndexer struct{ fn client.IndexerFunc }

func (r *recordingIndexer) IndexField(_ context.Context, _ client.Object, _ string, fn client.IndexerFunc) error {
	r.fn = fn
	return nil
}

func TestForgetsAfterTTL(t *testing.T) {
	ctx := t.Context()
	c, _, ns := newLagging(t)
	now := time.Now()
	c.now = func() time.Time { return now }
	cluster := newCluster(ns)
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), &gpulabv1alpha1.GPUCluster{}); err != nil {
		t.Fatalf("a creation the cache has not seen yet: %v", err)
	}
	now = now.Add(TTL + time.Second)
	err := c.Get(ctx, client.ObjectKeyFromObject(cluster), &gpulabv1alpha1.GPUCluster{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("after TTL the cache's NotFound should stand, got %v", err)
	}
}

// TestTrackForgetsWhatOthersDeleted: a creation the reads have not caught
// up with is forgotten once the informer reports its deletion by someone
// else, not only after TTL.
func TestTrackForgetsWhatOthersDeleted(t *testing.T) {
	ctx := t.Context()
	c, _, ns := newLagging(t)
	informers, err := cache.New(env.Config, cache.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Track(ctx, informers, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("informers did not sync")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	err = pollpkg.Until(ctx, 30*time.Second, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err), fmt.Sprintf("Get: %v", err)
	})
	if err != nil {
		t.Fatalf("a pod deleted by someone else still reads as present: %v", err)
	}
}
