package dashboards_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	grafana "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/dashboards"
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
