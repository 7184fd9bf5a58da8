package charts

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "gpulab"
	releaseName = "gpulab"
	namespace   = "gpulab-system"
)

// repo is a path from the repository root (this package is one below it).
func repo(p ...string) string { return filepath.Join(append([]string{".."}, p...)...) }

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	v, err := ReadVersion(repo("VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := Load(chartDir, v)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// values parses a values document (YAML) for the chart.
func values(t *testing.T, doc string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(doc))
	if err != nil {
		t.Fatalf("values %q: %v", doc, err)
	}
	return v
}

func capabilities() *chartutil.Capabilities {
	caps := *chartutil.DefaultCapabilities
	caps.KubeVersion = KubeVersion
	return &caps
}

// renderFiles renders the chart as `helm template` would for release gpulab
// in gpulab-system: the schema first, then every template.
func renderFiles(ch *chart.Chart, vals map[string]any) (map[string]string, error) {
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, capabilities())
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true, LintMode: false}.Render(ch, rv)
}

// rendered is the chart's output for one set of values.
type rendered struct {
	files   map[string]string
	objects []*unstructured.Unstructured
}

func render(t *testing.T, ch *chart.Chart, vals map[string]any) *rendered {
	t.Helper()
	files, err := renderFiles(ch, vals)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	r := &rendered{files: files}
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		objs, err := decode(files[name])
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, files[name])
		}
		r.objects = append(r.objects, objs...)
	}
	return r
}

// decode splits a multi-document YAML stream into objects, skipping empty
// documents, and requires each to have a kind and a name.
func decode(s string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(s), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetKind() == "" || obj.GetName() == "" {
			return nil, errors.New("an object without kind or name")
		}
		objs = append(objs, obj)
	}
}

func decodeFile(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(string(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return objs
}

// find returns the one rendered object of kind and name, failing otherwise.
func (r *rendered) find(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind && o.GetName() == name {
			if found != nil {
				t.Fatalf("two %s %s", kind, name)
			}
			found = o
		}
	}
	if found == nil {
		t.Fatalf("no %s %s rendered; have %v", kind, name, r.kinds())
	}
	return found
}

func (r *rendered) has(kind, name string) bool {
	for _, o := range r.objects {
		if o.GetKind() == kind && o.GetName() == name {
			return true
		}
	}
	return false
}

// kinds lists kind/name of every object, for failure messages.
func (r *rendered) kinds() []string {
	var out []string
	for _, o := range r.objects {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

func (r *rendered) count(kind string) int {
	n := 0
	for _, o := range r.objects {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

// into converts an object into a typed one.
func into(t *testing.T, obj *unstructured.Unstructured, typed any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, typed, true); err != nil {
		t.Fatalf("%s %s does not decode into %T: %v", obj.GetKind(), obj.GetName(), typed, err)
	}
}

// toYAML is for failure messages.
func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(bytes.TrimSpace(b))
}
