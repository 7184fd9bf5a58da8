package kind

import (
	"context"
	"errors"
	"slices"
	"testing"

	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
)

// fakeProvider is kind's provider with clusters that exist by name only.
type fakeProvider struct {
	clusters []string
	created  []string
	deleted  []string
}

func (f *fakeProvider) List() ([]string, error) { return f.clusters, nil }
func (f *fakeProvider) Create(name string, _ ...cluster.CreateOption) error {
	f.created = append(f.created, name)
	f.clusters = append(f.clusters, name)
	return errors.New("fake: no Docker")
}
func (f *fakeProvider) Delete(name, _ string) error {
	f.deleted = append(f.deleted, name)
	f.clusters = slices.DeleteFunc(f.clusters, func(n string) bool { return n == name })
	return nil
}
func (f *fakeProvider) ListInternalNodes(string) ([]nodes.Node, error) { return nil, nil }
func (f *fakeProvider) CollectLogs(string, string) error               { return nil }

func newFakeCluster(t *testing.T, f *fakeProvider, reuse bool) *Cluster {
	t.Helper()
	c, err := New(context.Background(), Options{Name: "theirs", CacheDir: t.TempDir(), Reuse: reuse, ArtifactsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c.provider = f
	return c
}

// A kind cluster of the name that gpulab did not create is refused by
// Create and by Down, and never deleted (creating over it used to fail and
// then delete it).
func TestExistingClusterIsNeverDeleted(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		f := &fakeProvider{clusters: []string{"theirs"}}
		c := newFakeCluster(t, f, reuse)
		if done, err := c.claimName(); !errors.Is(err, ErrClusterExists) || done {
			t.Fatalf("reuse=%v: claimName = %v, %v; want ErrClusterExists", reuse, done, err)
		}
		if err := c.Down(context.Background()); !errors.Is(err, ErrClusterExists) {
			t.Fatalf("reuse=%v: Down = %v, want ErrClusterExists", reuse, err)
		}
		if len(f.deleted) > 0 || len(f.created) > 0 {
			t.Fatalf("reuse=%v: created %v, deleted %v; want neither", reuse, f.created, f.deleted)
		}
	}
}

// A cluster gpulab created is refused without --reuse, used with it, and
// deleted by Down.
func TestOwnClusterReuseAndDown(t *testing.T) {
	f := &fakeProvider{}
	c := newFakeCluster(t, f, false)
	if done, err := c.claimName(); err != nil || done {
		t.Fatalf("claimName on a free name = %v, %v", done, err)
	}
	f.clusters = append(f.clusters, "theirs") // created, as kind would
	again := newFakeCluster(t, f, false)
	again.kubeconfig = c.kubeconfig
	if _, err := again.claimName(); !errors.Is(err, ErrClusterExists) {
		t.Fatalf("a second create over gpulab's cluster without Reuse: %v, want ErrClusterExists", err)
	}
	again.opts.Reuse = true
	if done, err := again.claimName(); err != nil || !done {
		t.Fatalf("Reuse of gpulab's cluster: %v, %v; want true, nil", done, err)
	}
	if err := c.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.deleted, []string{"theirs"}) {
		t.Fatalf("deleted %v, want gpulab's cluster", f.deleted)
	}
}
