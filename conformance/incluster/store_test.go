package incluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/testbeds/envtest"
	"github.com/gpulab/gpulab/testbeds/local"
)

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func random(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Results larger than one ConfigMap (the API server refuses one over
// 1 MiB) are stored across the run's parts by the runner's own
// ServiceAccount, which may update exactly those and create none, and
// come back whole; results too large even for MaxParts lose their
// largest logs first, and the index says which.
func TestStoreSplitsAcrossConfigMaps(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{})
	ctx := context.Background()
	const ns = "runner-store"
	if _, err := incluster.Submit(ctx, env.Client, incluster.Options{Namespace: ns, Image: "i", RunID: "big"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := env.AsUser("system:serviceaccount:"+ns+":"+rbac.Name, "system:serviceaccounts")
	if err != nil {
		t.Fatal(err)
	}
	sa, err := client.New(cfg, client.Options{Scheme: local.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	// 2.5 MiB of logs that do not compress: three parts.
	out := t.TempDir()
	want := map[string][]byte{"results.json": []byte(`{"verdict":"PASSED"}`), "junit.xml": []byte("<x/>"),
		"logs/operator-0.log": random(t, 1500<<10), "logs/operator-1.log": random(t, 1000<<10), "perfdata/p.json": []byte("{}")}
	writeFiles(t, out, want)
	writeFiles(t, out, map[string][]byte{"scratch.tmp": []byte("not the suite's")})
	name := incluster.ConfigMapName("big")
	stored, err := incluster.Store(ctx, sa, ns, name, "big", "PASSED", out)
	if err != nil {
		t.Fatalf("storing 2.5 MiB as the runner: %v", err)
	}
	if len(stored.Parts) != 3 || len(stored.Dropped) != 0 {
		t.Errorf("stored %+v, want 3 parts and nothing dropped", stored)
	}
	back := t.TempDir()
	got, err := incluster.Retrieve(ctx, env.Client, ns, "big", back, incluster.RetrieveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != len(want) {
		t.Errorf("retrieved %v, want the %d files the suite wrote", got.Files, len(want))
	}
	for name, data := range want {
		if b, err := os.ReadFile(filepath.Join(back, filepath.FromSlash(name))); err != nil || !bytes.Equal(b, data) {
			t.Errorf("%s came back as %d bytes (%v), want %d", name, len(b), err, len(data))
		}
	}
	st, err := incluster.Status(ctx, env.Client, ns, "big")
	if err != nil || st.Verdict != "PASSED" {
		t.Errorf("Status: %+v, %v; want the stored verdict", st, err)
	}

	// The runner may create no ConfigMap, nor touch one not its run's.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}}
	if err := sa.Create(ctx, other.DeepCopy()); !apierrors.IsForbidden(err) {
		t.Errorf("the runner creating a ConfigMap: %v, want Forbidden", err)
	}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := sa.Get(ctx, client.ObjectKeyFromObject(other), &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
		t.Errorf("the runner reading another ConfigMap: %v, want Forbidden", err)
	}

	// 9 MiB that do not compress: more than 8 parts hold. The largest log
	// goes, the rest is stored, and the index says what went; a smaller
	// store then empties the parts it no longer needs.
	huge := t.TempDir()
	writeFiles(t, huge, map[string][]byte{"results.json": []byte(`{"verdict":"PASSED"}`),
		"logs/a.log": random(t, 5<<20), "logs/b.log": random(t, 4<<20), "logs/c.log": []byte("small")})
	stored, err = incluster.Store(ctx, sa, ns, name, "big", "PASSED", huge)
	if err != nil {
		t.Fatalf("storing 9 MiB as the runner: %v", err)
	}
	if !slices.Equal(stored.Dropped, []string{"logs/a.log"}) || len(stored.Parts) != 5 {
		t.Errorf("stored %+v, want logs/a.log dropped and 4 MiB in 5 parts", stored)
	}
	back = t.TempDir()
	got, err = incluster.Retrieve(ctx, env.Client, ns, "big", back, incluster.RetrieveOptions{})
	if err != nil || !slices.Equal(got.Dropped, []string{"logs/a.log"}) || len(got.Files) != 3 {
		t.Errorf("retrieved %+v, %v; want 3 files and logs/a.log named as dropped", got, err)
	}
	small := t.TempDir()
	writeFiles(t, small, map[string][]byte{"results.json": []byte(`{}`)})
	if stored, err = incluster.Store(ctx, sa, ns, name, "big", "FAILED", small); err != nil || len(stored.Parts) != 1 {
		t.Fatalf("storing again: %+v, %v", stored, err)
	}
	for _, part := range incluster.PartNames(name)[1:] {
		var cm corev1.ConfigMap
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: part}, &cm); err != nil || len(cm.BinaryData) > 0 {
			t.Errorf("part %s after a one-part store: %d keys, %v; want it there and empty", part, len(cm.BinaryData), err)
		}
	}
}
