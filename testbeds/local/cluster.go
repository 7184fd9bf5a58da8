package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/internal/manifest"
	"github.com/gpulab/gpulab/internal/scheme"
)

// fieldManager owns what the testbed applies.
const fieldManager = "gpulab-testbed"

// Scheme is gpulab's shared scheme (internal/scheme), named here for the
// testbed's tests.
var Scheme = scheme.Scheme

// RESTConfig is the running testbed's admin client configuration.
func (t *Testbed) RESTConfig() (*rest.Config, error) { return restConfig(t.Kubeconfig()) }

// restConfig loads a kubeconfig with the certificate files it names read
// in. client-go caches TLS transports by those files' paths, and a testbed
// created again under the same name (bench-scale's scales, one process)
// has new certificates at the same paths: its clients would dial it with
// the first testbed's CA and fail x509 verification.
func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading testbed kubeconfig: %w", err)
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("loading testbed kubeconfig's certificates: %w", err)
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = "", "", ""
	return cfg, nil
}

// Client returns a client for the running testbed, with Scheme.
func (t *Testbed) Client() (client.Client, error) {
	cfg, err := t.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	// The client's own log goes to the testbed's: without one,
	// controller-runtime prints a stack trace saying none was set.
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(t.opts.Log, prefix, args) }, funcr.Options{})
	return client.New(cfg, client.Options{Scheme: Scheme, Log: log})
}

// installCRDs server-side applies every CRD in the given folders and waits
// until the API server serves them: Established, and their kinds known to
// the client's discovery, which can lag behind Established under load
// ("no matches for kind KWOKNodeClass" right after its CRD was Established).
func installCRDs(ctx context.Context, c client.Client, dirs ...string) error {
	var names []string
	for _, dir := range dirs {
		objs, err := readManifests(dir)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
				return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
			names = append(names, obj.GetName())
		}
	}
	return poll(ctx, crdTimeout, func(ctx context.Context) (bool, error) { return crdsServed(ctx, c, names) })
}

// crdsServed says whether every named CRD is Established and its kind maps
// to a resource, in every served version, through c's RESTMapper, which
// reloads a group version's discovery on each miss.
func crdsServed(ctx context.Context, c client.Client, names []string) (bool, error) {
	for _, name := range names {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if !crdEstablished(&crd) {
			return false, nil
		}
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			// By version: asked for a group only, the mapper may answer
			// from a group list cached before this CRD added a version.
			if _, err := c.RESTMapper().RESTMapping(gk, v.Name); err != nil {
				if meta.IsNoMatchError(err) {
					return false, nil
				}
				return false, err
			}
		}
	}
	return true, nil
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// readManifests decodes every YAML document of every .yaml file in dir.
func readManifests(dir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", dir)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		decoded, err := manifest.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", f, err)
		}
		objs = append(objs, decoded...)
	}
	return objs, nil
}

// createNodes registers the fake nodes. The status (capacity, allocatable)
// is written through the status subresource too, because node creation may
// drop it; kwok's node-initialize stage keeps what is there.
func createNodes(ctx context.Context, c client.Client, nodes []*corev1.Node) error {
	for _, n := range nodes {
		status := n.Status.DeepCopy()
		if err := c.Create(ctx, n); err != nil && !isAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", n.Name, err)
		}
		patch := client.MergeFrom(n.DeepCopy())
		n.Status.Capacity = status.Capacity
		n.Status.Allocatable = status.Allocatable
		n.Status.NodeInfo = status.NodeInfo
		if err := c.Status().Patch(ctx, n, patch); err != nil {
			return fmt.Errorf("setting capacity of node %s: %w", n.Name, err)
		}
	}
	return nil
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// nodeReady says whether a node's Ready condition is True and the node
// lifecycle controller has lifted its not-ready and unreachable taints,
// which it does a moment after (seconds later on a loaded machine): until
// then no pod is placed there, and the suite leaves the node out of its
// footprint.
func nodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describe lists names for error messages.
func describe(names []string) string {
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}
