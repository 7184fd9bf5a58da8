package dashboards_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	grafana "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/dashboards"
	"github.com/gpulab/gpulab/testbeds/local/binaries"
)

// TestGeneratedFilesAreCurrent fails when the committed JSON or
// PrometheusRule differs from what `go generate ./dashboards` writes.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := dashboards.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s: %v (run go generate ./dashboards)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./dashboards", name)
		}
	}
	for _, dir := range []string{"grafana", filepath.Join(dashboards.ChartDir, "dashboards")} {
		on, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		if len(on) != len(dashboards.All()) {
			t.Errorf("%s holds %d dashboards, the generator %d: remove the stale ones", dir, len(on), len(dashboards.All()))
		}
	}
}

// dashboard is a dashboard as a user imports it: the JSON file, decoded
// without the generator's types.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	Multi      bool            `json:"multi"`
	AllValue   string          `json:"allValue"`
	Regex      string          `json:"regex"`
	Options    []struct {
		Text  string `json:"text"`
		Value string `json:"value"`
	} `json:"options"`
	Current struct {
		Value any `json:"value"`
	} `json:"current"`
}

// expr is the PromQL of a query variable (object or legacy string form).
func (v variable) expr() string {
	var obj struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.Query, &obj) == nil && obj.Query != "" {
		return obj.Query
	}
	var s string
	_ = json.Unmarshal(v.Query, &s)
	return s
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  *datasource `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []target `json:"targets"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Instant    bool        `json:"instant"`
	Datasource *datasource `json:"datasource"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	paths, err := filepath.Glob("grafana/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no dashboards in grafana/: %v", err)
	}
	out := map[string]dashboard{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		dec := json.NewDecoder(bytes.NewReader(data))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[p] = d
	}
	return out
}

var (
	varRef   = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
	builtins = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
)

// TestDashboardSchema checks what Grafana needs to import the dashboards and
// what makes them usable: unique uids and panel ids, the datasource chosen
// by a variable everywhere, every panel with queries and a unit, every
// variable a query uses defined, panels inside the 24-column grid without
// overlapping.
func TestDashboardSchema(t *testing.T) {
	uids, titles := map[string]string{}, map[string]string{}
	for path, d := range loadDashboards(t) {
		if d.UID == "" || len(d.UID) > 40 {
			t.Errorf("%s: uid %q must be 1-40 characters", path, d.UID)
		}
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s: uid %q also used by %s", path, d.UID, other)
		}
		uids[d.UID] = path
		if other, ok := titles[d.Title]; ok {
			t.Errorf("%s: title %q also used by %s", path, d.Title, other)
		}
		titles[d.Title] = path
		if d.SchemaVersion != dashboards.SchemaVersion {
			t.Errorf("%s: schemaVersion %d, want %d", path, d.SchemaVersion, dashboards.SchemaVersion)
		}
		vars := map[string]bool{}
		for i, v := range d.Templating.List {
			vars[v.Name] = true
			switch {
			case v.Name == "datasource":
				if i != 0 || v.Type != "datasource" || strings.Trim(string(v.Query), `"`) != "prometheus" {
					t.Errorf("%s: the first variable must be datasource (type datasource, query prometheus)", path)
				}
			case v.Type == "query":
				if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
					t.Errorf("%s: variable %s does not use ${datasource}", path, v.Name)
				}
				switch q := v.expr(); {
				case labelValuesRE.MatchString(q):
				case queryResultRE.MatchString(q):
					// Grafana keeps the regex's first group of each result line.
					if re, err := grafanaRegex(v.Regex); err != nil || re.NumSubexp() != 1 {
						t.Errorf("%s: variable %s: query_result needs a regex with one group, has %q (%v)", path, v.Name, v.Regex, err)
					}
				default:
					t.Errorf("%s: variable %s query %q is neither label_values(selector, label) nor query_result(expr)", path, v.Name, q)
				}
			case v.Type == "custom":
				if len(v.Options) < 2 || v.Current.Value != v.Options[0].Value {
					t.Errorf("%s: custom variable %s needs its choices as options, the first current: %+v", path, v.Name, v)
				}
			default:
				t.Errorf("%s: variable %s has unexpected type %q", path, v.Name, v.Type)
			}
		}
		if !vars["datasource"] {
			t.Errorf("%s: no datasource variable", path)
		}
		checkClusterVariable(t, path, d)
		checkRefs := func(where, expr string) {
			for _, m := range varRef.FindAllStringSubmatch(expr, -1) {
				if !vars[m[1]] && !builtins[m[1]] {
					t.Errorf("%s: %s uses undefined variable $%s", path, where, m[1])
				}
			}
		}
		for _, v := range d.Templating.List {
			if v.Type == "query" {
				checkRefs("variable "+v.Name, v.expr())
			}
		}
		ids := map[int]bool{}
		var cells []panel
		for _, p := range d.Panels {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("%s: panel %q has a missing or duplicate id %d", path, p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.X < 0 || p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
				t.Errorf("%s: panel %q is outside the grid: %+v", path, p.Title, p.GridPos)
			}
			for _, q := range cells {
				if p.GridPos.X < q.GridPos.X+q.GridPos.W && q.GridPos.X < p.GridPos.X+p.GridPos.W &&
					p.GridPos.Y < q.GridPos.Y+q.GridPos.H && q.GridPos.Y < p.GridPos.Y+p.GridPos.H {
					t.Errorf("%s: panels %q and %q overlap", path, p.Title, q.Title)
				}
			}
			cells = append(cells, p)
			if p.Type == "row" {
				continue
			}
			where := fmt.Sprintf("panel %q", p.Title)
			if p.Title == "" || p.Description == "" {
				t.Errorf("%s: %s needs a title and a description (the question it answers)", path, where)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: %s does not use ${datasource}", path, where)
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: %s has no unit", path, where)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: %s has no targets", path, where)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("%s: %s has a target with an empty expr or a missing or duplicate refId %q", path, where, tg.RefID)
				}
				refs[tg.RefID] = true
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: %s target %s does not use ${datasource}", path, where, tg.RefID)
				}
				checkRefs(where, tg.Expr)
				for _, sel := range selectors(tg.Expr) {
					if !strings.Contains(sel, `cluster=~"$cluster"`) {
						t.Errorf("%s: %s target %s: selector {%s} does not filter on $cluster", path, where, tg.RefID, sel)
					}
				}
			}
		}
	}
}

// checkClusterVariable checks the dashboard has the cluster picker every
// query filters on: label_values(..., cluster), multi, All being ".*" (so a
// Prometheus without cluster labels still shows everything).
func checkClusterVariable(t *testing.T, path string, d dashboard) {
	t.Helper()
	for _, v := range d.Templating.List {
		if v.Name != "cluster" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.expr())
		if v.Type != "query" || m == nil || m[2] != "cluster" || !v.Multi || !v.IncludeAll || v.AllValue != ".*" {
			t.Errorf("%s: variable cluster must be label_values(..., cluster), multi, include All with allValue .*: %+v", path, v)
		}
		return
	}
	t.Errorf("%s: no cluster variable", path)
}

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

// promtool is the one `make testbed-binaries` builds into the cache.
func promtool(t *testing.T) string {
	t.Helper()
	m, err := binaries.LookupMonitoring(t.Context(), binaries.Options{})
	if err != nil {
		if testing.Short() {
			t.Skipf("%v; required without -short", err)
		}
		t.Fatal(err)
	}
	return m.Promtool
}

// TestRules runs promtool over the rule files and their unit tests, and
// checks every alert has a unit test that expects it to fire.
func TestRules(t *testing.T) {
	bin := promtool(t)
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(append([]string{"check", "rules"}, dashboards.RuleFiles...)...)
	tests, err := filepath.Glob("prometheus/tests/*.test.yml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests: %v", err)
	}
	run(append([]string{"test", "rules"}, tests...)...)

	alerts := map[string]bool{}
	for _, f := range dashboards.RuleFiles {
		var rf struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
				} `json:"rules"`
			} `json:"groups"`
		}
		readYAML(t, f, &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts[r.Alert] = false
				}
			}
		}
	}
	for _, f := range tests {
		var tf struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string `json:"alertname"`
					ExpAlerts []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		readYAML(t, f, &tf)
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTest {
				if _, ok := alerts[a.Alertname]; !ok {
					t.Errorf("%s tests unknown alert %s", f, a.Alertname)
				}
				if len(a.ExpAlerts) > 0 {
					alerts[a.Alertname] = true
				}
			}
		}
	}
	for name, fired := range alerts {
		if !fired {
			t.Errorf("alert %s has no unit test expecting it to fire", name)
		}
	}
}

// TestLocalScrapeConfig checks the local testbed's Prometheus config.
func TestLocalScrapeConfig(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	copyTree(t, "prometheus", dir)
	if err := (dashboards.LocalTargets{Operator: "127.0.0.1:1", Agent: "127.0.0.1:2", VolcanoScheduler: "127.0.0.1:3", Pushgateway: "127.0.0.1:4", Cluster: "lab"}).Write(filepath.Join(dir, "local", "targets")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "config", filepath.Join(dir, "local", "prometheus.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	readYAML(t, filepath.Join(dir, "local", "targets", "gpulab-agent.json"), &groups)
	if len(groups) != 1 || groups[0].Labels["cluster"] != "lab" {
		t.Errorf("gpulab-agent targets %+v: want one group labelled cluster=lab", groups)
	}
}

// TestMonitorsSelectTheInstall checks the Prometheus-Operator monitors select
// the Service and DaemonSet gpulab installs, by label, namespace and port.
func TestMonitorsSelectTheInstall(t *testing.T) {
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			JobLabel          string                                  `json:"jobLabel"`
			Selector          struct{ MatchLabels map[string]string } `json:"selector"`
			NamespaceSelector struct{ MatchNames []string }           `json:"namespaceSelector"`
			Endpoints         []struct{ Port string }                 `json:"endpoints"`
			PodEndpoints      []struct{ Port string }                 `json:"podMetricsEndpoints"`
			Ports             []struct{ Name string }                 `json:"ports"`
			Template          struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					Containers []struct {
						Ports []struct{ Name string } `json:"ports"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	load := func(path string) []object {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []object
		for _, doc := range strings.Split(string(data), "\n---") {
			var o object
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if o.Kind != "" {
				out = append(out, o)
			}
		}
		return out
	}
	find := func(objs []object, kind, name string) object {
		for _, o := range objs {
			if o.Kind == kind && o.Metadata.Name == name {
				return o
			}
		}
		t.Fatalf("no %s %s", kind, name)
		return object{}
	}
	selects := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	svc := find(load("../operator/config/manager/manager.yaml"), "Service", "gpulab-operator-metrics")
	sm := find(load("prometheus/operator/servicemonitor-operator.yaml"), "ServiceMonitor", "gpulab-operator")
	if !selects(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select Service labels %v", sm.Spec.Selector.MatchLabels, svc.Metadata.Labels)
	}
	if svc.Metadata.Labels[sm.Spec.JobLabel] != "gpulab-operator" {
		t.Errorf("ServiceMonitor jobLabel %q gives job %q, the alerts expect gpulab-operator", sm.Spec.JobLabel, svc.Metadata.Labels[sm.Spec.JobLabel])
	}
	if len(sm.Spec.Endpoints) != 1 || len(svc.Spec.Ports) == 0 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("ServiceMonitor endpoints %v do not name the Service's port %v", sm.Spec.Endpoints, svc.Spec.Ports)
	}
	if ns := sm.Spec.NamespaceSelector.MatchNames; len(ns) != 1 || ns[0] != svc.Metadata.Namespace {
		t.Errorf("ServiceMonitor namespaces %v, Service in %q", ns, svc.Metadata.Namespace)
	}

	ds := find(load("../node-agent/config/daemonset.yaml"), "DaemonSet", "gpulab-agent")
	pm := find(load("prometheus/operator/podmonitor-agent.yaml"), "PodMonitor", "gpulab-agent")
	podLabels := ds.Spec.Template.Metadata.Labels
	if !selects(pm.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodMonitor selector %v does not select agent pods %v", pm.Spec.Selector.MatchLabels, podLabels)
	}
	if podLabels[pm.Spec.JobLabel] != "gpulab-agent" {
		t.Errorf("PodMonitor jobLabel %q gives job %q, the alerts expect gpulab-agent", pm.Spec.JobLabel, podLabels[pm.Spec.JobLabel])
	}
	ports := map[string]bool{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
	}
	if len(pm.Spec.PodEndpoints) != 1 || !ports[pm.Spec.PodEndpoints[0].Port] {
		t.Errorf("PodMonitor endpoints %v do not name an agent container port %v", pm.Spec.PodEndpoints, ports)
	}
	if ns := pm.Spec.NamespaceSelector.MatchNames; len(ns) != 1 || ns[0] != ds.Metadata.Namespace {
		t.Errorf("PodMonitor namespaces %v, DaemonSet in %q", ns, ds.Metadata.Namespace)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// copyTree copies the regular files under src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDashboardsDecodeStrictly decodes each file as Grafana's dashboard
// model, strictly (an unknown field, a missing required one or a wrong type
// fails), as the SDK's schema for this schemaVersion defines it; a tampered
// copy must fail, so the check is real.
func TestDashboardsDecodeStrictly(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	decode := func(b []byte) error {
		var d grafana.Dashboard //nolint:staticcheck // the classic model the files hold (see grafana.go)
		err := d.UnmarshalJSONStrict(b)
		// The SDK returns its error list typed even when it is empty.
		var errs cog.BuildErrors
		if errors.As(err, &errs) && len(errs) == 0 {
			return nil
		}
		return err
	}
	for _, f := range dashboards.All() {
		b, err := os.ReadFile(filepath.Join("grafana", f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if err := decode(b); err != nil {
			t.Errorf("grafana/%s does not decode as Grafana's dashboard model: %v", f.Name, err)
		}
		tampered := bytes.Replace(b, []byte(`"gridPos": {`), []byte(`"gridPos": {"depth": 1, `), 1)
		if decode(tampered) == nil {
			t.Errorf("grafana/%s with an unknown gridPos field decoded strictly", f.Name)
		}
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

// TestDashboardConfigMaps checks the sidecar ConfigMaps hold each dashboard
// byte for byte (minus the final newline a literal block drops) under the
// label kube-prometheus-stack's sidecar selects, and that the Helm chart's
// copies are identical.
func TestDashboardConfigMaps(t *testing.T) {
	data, err := os.ReadFile(dashboards.DashboardConfigMapsPath)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var cm struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			t.Fatalf("%s: %v", dashboards.DashboardConfigMapsPath, err)
		}
		if cm.Kind != "ConfigMap" {
			continue
		}
		if cm.Metadata.Labels["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %v lacks grafana_dashboard: \"1\"", cm.Metadata)
		}
		for k, v := range cm.Data {
			held[k] = v
		}
	}
	for _, f := range dashboards.All() {
		want, err := os.ReadFile(filepath.Join("grafana", f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if got := held["gpulab-"+f.Name]; got != strings.TrimSuffix(string(want), "\n") {
			t.Errorf("ConfigMap key gpulab-%s differs from grafana/%s", f.Name, f.Name)
		}
		chart, err := os.ReadFile(filepath.Join(dashboards.ChartDir, "dashboards", f.Name))
		if err != nil || !bytes.Equal(chart, want) {
			t.Errorf("%s/dashboards/%s is not a copy of grafana/%s (%v): run go generate ./dashboards", dashboards.ChartDir, f.Name, f.Name, err)
		}
	}
	if len(held) != len(dashboards.All()) {
		t.Errorf("%d dashboards in ConfigMaps, %d generated", len(held), len(dashboards.All()))
	}
}
