package publisher_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/poll/polltest"
	"github.com/gpulab/gpulab/testbeds/envtest"
	"github.com/gpulab/gpulab/testbeds/local"
)

// env is one API server shared by the package's tests (skipped with -short);
// admin is a client of it that can also watch, as publishers need.
var (
	env   *envtest.Environment
	admin client.WithWatch
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if !testing.Short() {
			e, err := envtest.Start(context.Background(), envtest.Options{})
			if err != nil {
				println("envtest:", err.Error())
				return 1
			}
			defer func() { _ = e.Stop() }()
			env = e
			if admin, err = client.NewWithWatch(e.Config, client.Options{Scheme: local.Scheme}); err != nil {
				println("client:", err.Error())
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

func needEnv(t *testing.T) *envtest.Environment {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	return env
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// eventually waits for cond, failing the test after 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, what, cond)
}

func createNode(t *testing.T, c client.Client, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := c.Create(ctx(t), n); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.Get(ctx(t), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	// envtest runs no garbage collector: delete the node's inventory with
	// it, so a rerun (-count) starts from nothing.
	t.Cleanup(func() {
		for _, obj := range []client.Object{&v1alpha1.GPUInventory{ObjectMeta: metav1.ObjectMeta{Name: name}}, n} {
			if err := c.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", name, err)
			}
		}
	})
	return n
}

// applyManifests creates every object in the named files of node-agent/config.
func applyManifests(t *testing.T, c client.Client, files ...string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("..", "..", "config", f))
		if err != nil {
			t.Fatal(err)
		}
		for doc := range strings.SplitSeq(string(b), "\n---\n") {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := c.Create(ctx(t), &u); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: creating %s %s: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// createNamespace creates a namespace of a generated name (envtest deletes
// none: a fixed name would still be terminating on a rerun).
func createNamespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx(t), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
