package charts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
)

// TestChartVersionIsTheRepositorys: version and appVersion follow VERSION,
// and the images default to that tag, never latest.
func TestChartVersionIsTheRepositorys(t *testing.T) {
	want, err := ReadVersion(repo("VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	ch := loadChart(t)
	if ch.Metadata.APIVersion != "v2" || ch.Metadata.Version != want || ch.Metadata.AppVersion != want {
		t.Errorf("Chart.yaml: apiVersion %q version %q appVersion %q, want v2, %q, %q",
			ch.Metadata.APIVersion, ch.Metadata.Version, ch.Metadata.AppVersion, want, want)
	}
	if _, err := Load(chartDir, "9.9.9"); err == nil {
		t.Error("Load accepted a chart whose version is not the one asked for")
	}
	r := render(t, ch, nil)
	var dep appsv1.Deployment
	into(t, r.find(t, "Deployment", "gpulab-operator"), &dep)
	var ds appsv1.DaemonSet
	into(t, r.find(t, "DaemonSet", "gpulab-agent"), &ds)
	for img, repoName := range map[string]string{
		dep.Spec.Template.Spec.Containers[0].Image: "ghcr.io/gpulab/gpulab-operator",
		ds.Spec.Template.Spec.Containers[0].Image:  "ghcr.io/gpulab/gpulab-agent",
	} {
		if img != repoName+":"+want {
			t.Errorf("image %q, want %s:%s", img, repoName, want)
		}
	}
}

// TestLintStrict: helm lint --strict passes with the defaults and with every
// optional part on.
func TestLintStrict(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults":      nil,
		"everything on": values(t, everythingOn),
	} {
		t.Run(name, func(t *testing.T) {
			if err := Lint(chartDir, vals); err != nil {
				t.Error(err)
			}
		})
	}
	// The linter must be able to fail: a template that cannot render.
	bad := filepath.Join(t.TempDir(), chartDir)
	copyDir(t, chartDir, bad)
	if err := os.WriteFile(filepath.Join(bad, "templates", "broken.yaml"), []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Values.nope.nope }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Lint(bad, nil); err == nil {
		t.Error("Lint passed a chart whose template fails to render")
	}
}

// TestCopiesAreIdentical: the chart's CRDs, dashboards and rule files are
// byte-identical copies of their sources (regenerate, then copy: a
// mismatch names the file).
func TestCopiesAreIdentical(t *testing.T) {
	for _, c := range []struct{ src, dst, glob string }{
		{repo("operator", "config", "crd", "bases"), filepath.Join(chartDir, "crds"), "*.yaml"},
		{repo("dashboards", "grafana"), filepath.Join(chartDir, "dashboards"), "*.json"},
		{repo("dashboards", "prometheus", "rules"), filepath.Join(chartDir, "files"), "*.rules.yml"},
	} {
		srcs, err := filepath.Glob(filepath.Join(c.src, c.glob))
		if err != nil || len(srcs) == 0 {
			t.Fatalf("no %s in %s (%v)", c.glob, c.src, err)
		}
		dsts, err := filepath.Glob(filepath.Join(c.dst, c.glob))
		if err != nil {
			t.Fatal(err)
		}
		if len(dsts) != len(srcs) {
			t.Errorf("%s holds %d %s, %s holds %d: copy them (cp %s/%s %s/)", c.dst, len(dsts), c.glob, c.src, len(srcs), c.src, c.glob, c.dst)
		}
		for _, src := range srcs {
			dst := filepath.Join(c.dst, filepath.Base(src))
			a, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(dst)
			if err != nil {
				t.Errorf("%s: %v (cp %s %s)", dst, err, src, dst)
				continue
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s differs from %s: cp %s %s", dst, src, src, dst)
			}
		}
	}
}

// TestValuesAreCommented: every value in values.yaml has a comment right
// above it, or sits inside a commented default (the keys of resources:); a
// block that only groups values needs none.
func TestValuesAreCommented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type block struct {
		indent     int
		documented bool
	}
	var stack []block
	lines := strings.Split(string(b), "\n")
	checked := 0
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "- ") {
			continue
		}
		_, rest, ok := strings.Cut(trimmed, ":")
		if !ok {
			continue
		}
		in := indent(line)
		for len(stack) > 0 && stack[len(stack)-1].indent >= in {
			stack = stack[:len(stack)-1]
		}
		documented := i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#")
		inherited := false
		for _, s := range stack {
			inherited = inherited || s.documented
		}
		isBlock := strings.TrimSpace(rest) == "" && i+1 < len(lines) && indent(lines[i+1]) > in
		if isBlock {
			stack = append(stack, block{in, documented || inherited})
			continue
		}
		checked++
		if !documented && !inherited {
			t.Errorf("values.yaml:%d: %q has no comment above it", i+1, trimmed)
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d values: the walk is broken", checked)
	}
}

func indent(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadmeListsEveryValue: the README's values table has a row for every
// value in values.yaml (or for the block holding it, such as
// operator.resources) and no row for a value that does not exist.
func TestReadmeListsEveryValue(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if key, ok := strings.CutPrefix(line, "| `"); ok {
			if k, _, ok := strings.Cut(key, "`"); ok {
				rows[k] = true
			}
		}
	}
	vals := loadChart(t).Values
	for row := range rows {
		if _, err := chartutil.Values(vals).PathValue(row); err != nil {
			// PathValue finds leaves only; a block row must be a table.
			if _, terr := chartutil.Values(vals).Table(row); terr != nil {
				t.Errorf("README row %s: no such value", row)
			}
		}
	}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			path := strings.TrimPrefix(prefix+"."+k, ".")
			if rows[path] {
				continue
			}
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(path, sub)
				continue
			}
			t.Errorf("values.yaml %s has no row in the README's values table", path)
		}
	}
	walk("", vals)
	if len(rows) < 50 {
		t.Errorf("only %d rows found in the README's values table", len(rows))
	}
}
