package dashboards_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/dashboards"
)

var (
	varRef   = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	builtins = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
)

var queryResultRE = regexp.MustCompile(`^query_result\((.+)\)$`)

// grafanaRegex compiles a variable's regex as Grafana writes it (/.../).
func grafanaRegex(s string) (*regexp.Regexp, error) {
	if len(s) < 2 || s[0] != '/' || s[len(s)-1] != '/' {
		return nil, fmt.Errorf("regex %q is not /.../", s)
	}
	return regexp.Compile(s[1 : len(s)-1])
}

// selectors returns the bodies of a PromQL expression's label selectors
// ({...} outside string literals).
func selectors(expr string) []string {
	var out []string
	quote, start := rune(0), -1
	for i, r := range expr {
		switch {
		case quote != 0:
			if r == quote && expr[i-1] != '\\' {
				quote = 0
			}
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case r == '{':
			start = i + 1
		case r == '}' && start >= 0:
			out = append(out, expr[start:i])
			start = -1
		}
	}
	return out
}

// TestSelectorsScanner keeps the cluster check above able to fail.
func TestSelectorsScanner(t *testing.T) {
	got := selectors(`sum(a{x="}", cluster=~"$cluster"}) / b{y=~"${source}.+"} or vector(0)`)
	want := []string{`x="}", cluster=~"$cluster"`, `y=~"${source}.+"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("selectors = %q, want %q", got, want)
	}
}

// TestGPUFleetSources checks the GPU-fleet dashboard's source switch: a
// custom variable offering gpulab-agent's and DCGM exporter's metric-name
// prefixes, and every per-GPU selector guarded by it, so one source's
// series never show while the other is selected.
func TestGPUFleetSources(t *testing.T) {
	d := loadDashboards(t)["grafana/gpu-fleet.json"]
	var source *variable
	for i, v := range d.Templating.List {
		if v.Name == "source" {
			source = &d.Templating.List[i]
		}
	}
	if source == nil || source.Type != "custom" || len(source.Options) != 2 ||
		source.Options[0].Value != dashboards.SourceGPULab.Value || source.Options[1].Value != dashboards.SourceDCGM.Value {
		t.Fatalf("gpu-fleet needs a custom variable source with values %q, %q: %+v", dashboards.SourceGPULab.Value, dashboards.SourceDCGM.Value, source)
	}
	bare := regexp.MustCompile(`(^|[^"])(gpulab_gpu_|DCGM_FI_)`) // a metric name, not a label name in quotes
	exprs := []string{}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			exprs = append(exprs, v.expr())
		}
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, e := range exprs {
		outside := e
		for _, sel := range selectors(e) {
			outside = strings.Replace(outside, sel, "", 1)
		}
		if bare.MatchString(outside) {
			t.Errorf("%q names a GPU series outside a guarded selector", e)
		}
		for _, sel := range selectors(e) {
			if strings.Contains(sel, "__name__=") && !strings.Contains(sel, `__name__=~"${source}.+"`) {
				t.Errorf("%q: selector {%s} is not guarded by ${source}", e, sel)
			}
		}
	}
}

// TestQueriesParse runs every panel and variable query, its variables
// substituted, through promtool's PromQL parser (as recording rules).
func TestQueriesParse(t *testing.T) {
	bin := promtool(t)
	var rules []map[string]any
	for path, d := range loadDashboards(t) {
		vals := map[string][]string{}
		for _, v := range d.Templating.List {
			vals[v.Name] = []string{"x"}
		}
		add := func(where, expr string) {
			if m := labelValuesRE.FindStringSubmatch(expr); m != nil {
				expr = m[1]
			} else if m := queryResultRE.FindStringSubmatch(expr); m != nil {
				expr = m[1]
			}
			rules = append(rules, map[string]any{"record": "dashboard_query", "expr": substitute(expr, vals, time.Now()), "labels": map[string]string{"query_of": where}})
		}
		for _, v := range d.Templating.List {
			if v.Type == "query" {
				add(path+" variable "+v.Name, v.expr())
			}
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				add(path+" panel "+p.Title, tg.Expr)
			}
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "queries.rules.yml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboards' %d queries: %v\n%s", len(rules), err, out)
	}
}

// TestDCGMFixture checks the recorded DCGM exporter page the live test
// serves: it parses as Prometheus text exposition, every series carries DCGM
// exporter's labels, and it has every DCGM_FI_* series the GPU-fleet
// dashboard names (so the live test's DCGM pass covers each of them).
func TestDCGMFixture(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "dcgm-exporter.prom"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("testdata/dcgm-exporter.prom: %v", err)
	}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			labels := map[string]bool{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
			for _, want := range []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"} {
				if !labels[want] {
					t.Errorf("%s series %v lacks label %s", name, m.GetLabel(), want)
				}
			}
		}
	}
	named := regexp.MustCompile(`__name__="(DCGM_FI_[A-Z_]+)"`)
	for _, p := range loadDashboards(t)["grafana/gpu-fleet.json"].Panels {
		for _, tg := range p.Targets {
			for _, m := range named.FindAllStringSubmatch(tg.Expr, -1) {
				if families[m[1]] == nil {
					t.Errorf("panel %q reads %s, which the recorded page lacks", p.Title, m[1])
				}
			}
		}
	}
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// substitute resolves variables as Grafana does with "All" selected on a
// multi-value variable: a regex alternation of every value.
func substitute(expr string, vals map[string][]string, start time.Time) string {
	return varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		name := strings.Trim(ref, "${}")
		switch name {
		case "__rate_interval":
			return "1m" // 4 x the local scrape interval of 5s, rounded up
		case "__interval":
			return "5s"
		case "__range":
			return strconv.Itoa(int(time.Since(start).Seconds())+1) + "s"
		}
		quoted := make([]string, 0, len(vals[name]))
		for _, v := range vals[name] {
			quoted = append(quoted, strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`))
		}
		return "(" + strings.Join(quoted, "|") + ")"
	})
}
