package dashboards

import (
	"encoding/json"
	"fmt"
)

// SchemaVersion is the Grafana dashboard JSON schema version written
// (Grafana 12).
const SchemaVersion = 41

// datasourceRef points every panel, target and variable at the dashboard's
// datasource variable, so users pick their Prometheus on import.
var datasourceRef = &DatasourceRef{Type: "prometheus", UID: "${datasource}"}

// DatasourceRef names a datasource.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Dashboard is the subset of Grafana's dashboard model gpulab uses.
type Dashboard struct {
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	Description   string         `json:"description"`
	Tags          []string       `json:"tags"`
	Editable      bool           `json:"editable"`
	GraphTooltip  int            `json:"graphTooltip"`
	Refresh       string         `json:"refresh"`
	SchemaVersion int            `json:"schemaVersion"`
	Version       int            `json:"version"`
	Time          TimeRange      `json:"time"`
	Timezone      string         `json:"timezone"`
	Templating    Templating     `json:"templating"`
	Annotations   Annotations    `json:"annotations"`
	Links         []any          `json:"links"`
	Panels        []*Panel       `json:"panels"`
	FiscalYear    int            `json:"fiscalYearStartMonth"`
	LiveNow       bool           `json:"liveNow"`
	WeekStart     string         `json:"weekStart"`
	TimePicker    map[string]any `json:"timepicker"`
}

// TimeRange is the default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Annotations holds the built-in annotation query.
type Annotations struct {
	List []map[string]any `json:"list"`
}

// Templating holds the dashboard's variables.
type Templating struct {
	List []*Variable `json:"list"`
}

// Variable is a template variable: the datasource picker or a label_values
// query.
type Variable struct {
	Name        string         `json:"name"`
	Label       string         `json:"label"`
	Description string         `json:"description,omitempty"`
	Type        string         `json:"type"`
	Datasource  *DatasourceRef `json:"datasource,omitempty"`
	Query       any            `json:"query"`
	Definition  string         `json:"definition,omitempty"`
	Regex       string         `json:"regex"`
	Refresh     int            `json:"refresh"`
	Sort        int            `json:"sort"`
	Multi       bool           `json:"multi"`
	IncludeAll  bool           `json:"includeAll"`
	Current     map[string]any `json:"current"`
	Options     []any          `json:"options"`
	Hide        int            `json:"hide"`
}

// VariableQuery is the Prometheus datasource's variable query object.
type VariableQuery struct {
	Query string `json:"query"`
	RefID string `json:"refId"`
}

// Panel is one panel; rows are panels of type "row" with no targets.
type Panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description,omitempty"`
	GridPos     GridPos        `json:"gridPos"`
	Datasource  *DatasourceRef `json:"datasource,omitempty"`
	Collapsed   *bool          `json:"collapsed,omitempty"`
	Panels      []*Panel       `json:"panels,omitempty"`
	FieldConfig *FieldConfig   `json:"fieldConfig,omitempty"`
	Options     map[string]any `json:"options,omitempty"`
	Targets     []*Target      `json:"targets,omitempty"`
	// Transformations post-process the query results (e.g. merge tables).
	Transformations []any `json:"transformations,omitempty"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// FieldConfig carries the unit and display defaults.
type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []any         `json:"overrides"`
}

// FieldDefaults are a panel's field defaults.
type FieldDefaults struct {
	Unit       string         `json:"unit"`
	Decimals   *int           `json:"decimals,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Max        *float64       `json:"max,omitempty"`
	Color      map[string]any `json:"color,omitempty"`
	Mappings   []any          `json:"mappings"`
	Thresholds map[string]any `json:"thresholds,omitempty"`
	Custom     map[string]any `json:"custom,omitempty"`
}

// Target is one PromQL query of a panel.
type Target struct {
	RefID        string         `json:"refId"`
	Datasource   *DatasourceRef `json:"datasource"`
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	Format       string         `json:"format,omitempty"`
	Instant      bool           `json:"instant"`
	Range        bool           `json:"range"`
	EditorMode   string         `json:"editorMode"`
	Interval     string         `json:"interval,omitempty"`
}

// MarshalIndent renders a dashboard as users import it.
func (d *Dashboard) MarshalIndent() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
	}
	return append(b, '\n'), nil
}

// newDashboard fills in what every gpulab dashboard shares.
func newDashboard(uid, title, description string, vars ...*Variable) *Dashboard {
	return &Dashboard{
		UID: uid, Title: title, Description: description,
		Tags:          []string{"gpulab"},
		Editable:      true,
		GraphTooltip:  1, // shared crosshair
		Refresh:       "30s",
		SchemaVersion: SchemaVersion,
		Version:       1,
		Time:          TimeRange{From: "now-1h", To: "now"},
		Timezone:      "browser",
		Templating:    Templating{List: append([]*Variable{datasourceVariable()}, vars...)},
		Annotations: Annotations{List: []map[string]any{{
			"builtIn": 1, "datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"},
			"enable": true, "hide": true, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
		}}},
		Links:      []any{map[string]any{"type": "dashboards", "tags": []string{"gpulab"}, "asDropdown": true, "title": "gpulab", "includeVars": false, "keepTime": true}},
		TimePicker: map[string]any{},
		WeekStart:  "",
	}
}

func datasourceVariable() *Variable {
	return &Variable{
		Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus",
		Refresh: 1, Current: map[string]any{}, Options: []any{},
	}
}

// labelValues is a multi-select query variable over label_values(selector,
// label), "All" selected by default.
func labelValues(name, label, selector, description string) *Variable {
	q := fmt.Sprintf("label_values(%s, %s)", selector, label)
	return &Variable{
		Name: name, Label: label, Description: description, Type: "query", Datasource: datasourceRef,
		Query: VariableQuery{Query: q, RefID: "StandardVariableQuery"}, Definition: q,
		Refresh: 2, // on time range change: nodes and GPUs come and go
		Sort:    3, // numerical ascending (GPU indexes)
		Multi:   true, IncludeAll: true,
		Current: map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}},
		Options: []any{},
	}
}

// layout assigns ids and grid positions: panels flow left to right in rows
// of 24 columns; a row panel starts a new line.
func layout(d *Dashboard, panels ...*Panel) *Dashboard {
	id, x, y, rowH := 1, 0, 0, 0
	for _, p := range panels {
		p.ID = id
		id++
		if p.Type == "row" {
			if x > 0 {
				y += rowH
			}
			p.GridPos = GridPos{H: 1, W: 24, X: 0, Y: y}
			y++
			x, rowH = 0, 0
			continue
		}
		if x+p.GridPos.W > 24 {
			y += rowH
			x, rowH = 0, 0
		}
		p.GridPos.X, p.GridPos.Y = x, y
		x += p.GridPos.W
		rowH = max(rowH, p.GridPos.H)
	}
	d.Panels = panels
	return d
}

func row(title string) *Panel {
	return &Panel{Type: "row", Title: title, Collapsed: new(false), Panels: []*Panel{}}
}

// query is a range target.
func query(expr, legend string) *Target {
	return &Target{Datasource: datasourceRef, Expr: expr, LegendFormat: legend, Range: true, EditorMode: "code"}
}

// instant is an instant target rendered as a table.
func instant(expr, legend string) *Target {
	return &Target{Datasource: datasourceRef, Expr: expr, LegendFormat: legend, Format: "table", Instant: true, EditorMode: "code"}
}

func withRefIDs(ts []*Target) []*Target {
	for i, t := range ts {
		t.RefID = string(rune('A' + i))
	}
	return ts
}

// legendTable shows the legend as a table with the last and max values.
var legendTable = map[string]any{"displayMode": "table", "placement": "right", "showLegend": true, "calcs": []string{"lastNotNull", "max"}}

func timeseries(title, description, unit string, w int, targets ...*Target) *Panel {
	return &Panel{
		Type: "timeseries", Title: title, Description: description, GridPos: GridPos{H: 8, W: w}, Datasource: datasourceRef,
		FieldConfig: &FieldConfig{Defaults: FieldDefaults{Unit: unit, Mappings: []any{}, Custom: map[string]any{
			"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false,
			"axisSoftMin": 0,
		}}, Overrides: []any{}},
		Options: map[string]any{
			"legend":  legendTable,
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		},
		Targets: withRefIDs(targets),
	}
}

// stacked is a timeseries with stacked areas (counts by state).
func stacked(title, description, unit string, w int, targets ...*Target) *Panel {
	p := timeseries(title, description, unit, w, targets...)
	p.FieldConfig.Defaults.Custom["stacking"] = map[string]any{"mode": "normal", "group": "A"}
	p.FieldConfig.Defaults.Custom["fillOpacity"] = 40
	return p
}

// stat shows the last value of each series; mappings and thresholds are
// optional.
func stat(title, description, unit string, w int, thresholds []any, mappings []any, targets ...*Target) *Panel {
	if mappings == nil {
		mappings = []any{}
	}
	defaults := FieldDefaults{Unit: unit, Mappings: mappings, Color: map[string]any{"mode": "thresholds"}}
	if thresholds == nil {
		thresholds = []any{map[string]any{"color": "green", "value": nil}}
	}
	defaults.Thresholds = map[string]any{"mode": "absolute", "steps": thresholds}
	return &Panel{
		Type: "stat", Title: title, Description: description, GridPos: GridPos{H: 5, W: w}, Datasource: datasourceRef,
		FieldConfig: &FieldConfig{Defaults: defaults, Overrides: []any{}},
		Options: map[string]any{
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"colorMode":     "background", "graphMode": "none", "justifyMode": "auto", "textMode": "auto",
			"orientation": "auto", "wideLayout": true, "showPercentChange": false,
		},
		Targets: withRefIDs(targets),
	}
}

// heatmap renders a Prometheus histogram's bucket increases.
func heatmap(title, description, unit string, w int, expr string) *Panel {
	t := query(expr, "{{le}}")
	t.Format = "heatmap"
	return &Panel{
		Type: "heatmap", Title: title, Description: description, GridPos: GridPos{H: 8, W: w}, Datasource: datasourceRef,
		FieldConfig: &FieldConfig{Defaults: FieldDefaults{Unit: unit, Mappings: []any{}}, Overrides: []any{}},
		Options: map[string]any{
			"calculate":    false,
			"cellGap":      1,
			"color":        map[string]any{"mode": "scheme", "scheme": "Oranges", "exponent": 0.5, "fill": "dark-orange", "reverse": false, "steps": 64},
			"yAxis":        map[string]any{"axisPlacement": "left", "unit": unit, "reverse": false},
			"rowsFrame":    map[string]any{"layout": "auto"},
			"tooltip":      map[string]any{"mode": "single", "yHistogram": true, "showColorScale": false},
			"legend":       map[string]any{"show": true},
			"cellValues":   map[string]any{"unit": "short"},
			"exemplars":    map[string]any{"color": "rgba(255,0,255,0.7)"},
			"filterValues": map[string]any{"le": 1e-9},
		},
		Targets: []*Target{withRefIDs([]*Target{t})[0]},
	}
}

// stateTimeline shows 0/1 verdicts over time with PASS/FAIL colours.
func stateTimeline(title, description string, w int, mappings []any, targets ...*Target) *Panel {
	return &Panel{
		Type: "state-timeline", Title: title, Description: description, GridPos: GridPos{H: 8, W: w}, Datasource: datasourceRef,
		FieldConfig: &FieldConfig{Defaults: FieldDefaults{
			Unit: "bool", Mappings: mappings, Color: map[string]any{"mode": "thresholds"},
			Thresholds: map[string]any{"mode": "absolute", "steps": []any{
				map[string]any{"color": "red", "value": nil}, map[string]any{"color": "green", "value": 1},
			}},
			Custom: map[string]any{"fillOpacity": 80, "lineWidth": 0},
		}, Overrides: []any{}},
		Options: map[string]any{
			"showValue": "never", "mergeValues": true, "rowHeight": 0.9, "alignValue": "left",
			"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
			"tooltip": map[string]any{"mode": "single", "sort": "none"},
		},
		Targets: withRefIDs(targets),
	}
}

// table shows instant query results, one row per series.
func table(title, description, unit string, w int, targets ...*Target) *Panel {
	return &Panel{
		Type: "table", Title: title, Description: description, GridPos: GridPos{H: 8, W: w}, Datasource: datasourceRef,
		FieldConfig: &FieldConfig{Defaults: FieldDefaults{Unit: unit, Mappings: []any{}, Custom: map[string]any{"align": "auto", "filterable": true}}, Overrides: []any{}},
		Options:     map[string]any{"showHeader": true, "cellHeight": "sm", "footer": map[string]any{"show": false, "reducer": []string{"sum"}, "fields": ""}},
		Targets:     withRefIDs(targets),
	}
}

// thresholds builds absolute threshold steps: base colour, then value/colour
// pairs.
func thresholds(base string, steps ...any) []any {
	out := []any{map[string]any{"color": base, "value": nil}}
	for i := 0; i+1 < len(steps); i += 2 {
		out = append(out, map[string]any{"value": steps[i], "color": steps[i+1]})
	}
	return out
}

// valueText maps exact values to text and colour.
func valueText(pairs ...any) []any {
	opts := map[string]any{}
	for i := 0; i+2 < len(pairs)+1; i += 3 {
		opts[fmt.Sprint(pairs[i])] = map[string]any{"text": pairs[i+1], "color": pairs[i+2], "index": i / 3}
	}
	return []any{map[string]any{"type": "value", "options": opts}}
}

// merged joins a table's queries into one table on their common labels.
func (p *Panel) merged() *Panel {
	p.Transformations = append(p.Transformations, map[string]any{"id": "merge", "options": map[string]any{}})
	return p
}
