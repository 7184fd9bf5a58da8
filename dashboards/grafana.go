package dashboards

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The dashboards are built with Grafana's own Go builders
// (grafana-foundation-sdk); this file holds what every gpulab dashboard
// shares on top of them. Nothing of the model is hand-written.
//
// The SDK marks its classic dashboard builder deprecated in favour of
// dashboardv2, the Kubernetes-style resource of Grafana 12's v2 dashboard
// API. gpulab keeps the classic model on purpose: it is what Grafana's JSON
// import, file provisioning and kube-prometheus-stack's dashboard sidecar
// load, in every Grafana version users run; hence the nolint:staticcheck
// (SA1019) below.

// SchemaVersion is the Grafana dashboard JSON schema version the builders
// write.
var SchemaVersion = int(dashboard.NewDashboard().SchemaVersion)

// clusterMatcher goes into every selector of every query, so one Prometheus
// (or Thanos, Mimir) can hold several clusters. The cluster variable's All
// is ".*", which also matches series without a cluster label: a Prometheus
// of one cluster needs no relabelling.
const clusterMatcher = `cluster=~"$cluster"`

// datasourceRef points every panel, target and variable at the dashboard's
// datasource variable, so users pick their Prometheus on import.
var datasourceRef = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// Dashboard is one gpulab dashboard under construction: Grafana's builder
// plus the next panel id (the builder lays panels out but leaves ids to us).
type Dashboard struct {
	UID     string
	builder *dashboard.DashboardBuilder //nolint:staticcheck // the classic model, see above
	nextID  uint32
}

// newDashboard fills in what every gpulab dashboard shares: the datasource
// variable first, then vars.
func newDashboard(uid, title, description string, vars ...cog.Builder[dashboard.VariableModel]) *Dashboard {
	//nolint:staticcheck // the classic model, see above
	b := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"gpulab"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Version(1).
		Time("now-1h", "now").
		Timezone("browser").
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		Annotation(dashboard.NewAnnotationQueryBuilder().
			Name("Annotations & Alerts").
			BuiltIn(1).
			Datasource(common.DataSourceRef{Type: cog.ToPtr("grafana"), Uid: cog.ToPtr("-- Grafana --")}).
			Enable(true).Hide(true).IconColor("rgba(0, 211, 255, 1)").Type("dashboard")).
		Link(dashboard.NewDashboardLinkBuilder("gpulab").
			Type(dashboard.DashboardLinkTypeDashboards).Tags([]string{"gpulab"}).
			AsDropdown(true).IncludeVars(false).KeepTime(true))
	for _, v := range vars {
		b.WithVariable(v)
	}
	return &Dashboard{UID: uid, builder: b, nextID: 1}
}

// row starts a new row (a full-width, uncollapsed row panel).
func (d *Dashboard) row(title string) *Dashboard {
	d.builder.WithRow(dashboard.NewRowBuilder(title).Id(d.id()))
	return d
}

// add appends panels; the builder flows them left to right in rows of 24
// columns.
func (d *Dashboard) add(panels ...cog.Builder[dashboard.Panel]) *Dashboard {
	for _, p := range panels {
		d.builder.WithPanel(withID{p, d.id()})
	}
	return d
}

func (d *Dashboard) id() uint32 {
	id := d.nextID
	d.nextID++
	return id
}

// Build returns Grafana's dashboard model.
func (d *Dashboard) Build() (dashboard.Dashboard, error) { //nolint:staticcheck // the classic model, see above
	m, err := d.builder.Build()
	if err != nil {
		return m, fmt.Errorf("dashboard %s: %w", d.UID, err)
	}
	return m, nil
}

// MarshalIndent renders a dashboard as users import it.
func (d *Dashboard) MarshalIndent() ([]byte, error) {
	m, err := d.Build()
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
	}
	return append(b, '\n'), nil
}

// withID sets a panel's id as it is built: every panel builder has Id, but
// they share no interface that offers it.
type withID struct {
	cog.Builder[dashboard.Panel]
	id uint32
}

func (p withID) Build() (dashboard.Panel, error) {
	panel, err := p.Builder.Build()
	panel.Id = &p.id
	return panel, err
}

// labelValues is a multi-select query variable over label_values(selector,
// label), "All" selected by default.
func labelValues(name, label, selector, description string) *dashboard.QueryVariableBuilder {
	return queryVariable(name, label, fmt.Sprintf("label_values(%s, %s)", selector, label), description)
}

// queryResult is a multi-select query variable over the instant result of
// expr, each value the regex's first group: for a label spelt differently
// by two exporters (gpulab's hostname, DCGM exporter's Hostname).
func queryResult(name, label, expr, regex, description string) *dashboard.QueryVariableBuilder {
	return queryVariable(name, label, fmt.Sprintf("query_result(%s)", expr), description).Regex(regex)
}

func queryVariable(name, label, q, description string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).Description(description).
		Datasource(datasourceRef).
		Query(dashboard.StringOrMap{Map: map[string]any{"query": q, "refId": "StandardVariableQuery"}}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged). // nodes and GPUs come and go
		Sort(dashboard.VariableSortNumericalAsc).             // GPU indexes
		Multi(true).IncludeAll(true).
		Current(allSelected())
}

// clusterVariable is the cluster picker over label_values(selector,
// cluster); All is ".*" so series without a cluster label still match.
func clusterVariable(selector string) *dashboard.QueryVariableBuilder {
	return labelValues("cluster", "cluster", selector,
		"Clusters in this Prometheus (the cluster label, e.g. from external_labels through Thanos or Mimir, or a relabelling). All also matches series without one.").
		AllValue(".*")
}

func allSelected() dashboard.VariableOption {
	return dashboard.VariableOption{
		Selected: cog.ToPtr(true),
		Text:     dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
		Value:    dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
	}
}

// choice is one value of a custom variable.
type choice struct{ Text, Value string }

// customVariable is a single-select variable over fixed values, the first
// selected.
func customVariable(name, label, description string, choices ...choice) *dashboard.CustomVariableBuilder {
	spec := ""
	options := make([]dashboard.VariableOption, 0, len(choices))
	for i, c := range choices {
		if i > 0 {
			spec += ","
		}
		spec += c.Text + " : " + c.Value
		options = append(options, dashboard.VariableOption{
			Selected: cog.ToPtr(i == 0),
			Text:     dashboard.StringOrArrayOfString{String: cog.ToPtr(c.Text)},
			Value:    dashboard.StringOrArrayOfString{String: cog.ToPtr(c.Value)},
		})
	}
	return dashboard.NewCustomVariableBuilder(name).
		Label(label).Description(description).
		Values(dashboard.StringOrMap{String: &spec}).
		Current(options[0]).
		Options(options).
		Multi(false).IncludeAll(false)
}

// query is a range target.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasourceRef).Expr(expr).LegendFormat(legend).
		Range().EditorMode(prometheus.QueryEditorModeCode)
}

// instant is an instant target rendered as a table.
func instant(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasourceRef).Expr(expr).LegendFormat(legend).
		Format(prometheus.PromQueryFormatTable).Instant().EditorMode(prometheus.QueryEditorModeCode)
}

// targets names the queries A, B, ... in order.
func targets(qs []*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(qs))
	for i, q := range qs {
		out = append(out, q.RefId(string(rune('A'+i))))
	}
	return out
}

func legendTable() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().
		DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementRight).
		ShowLegend(true).Calcs([]string{"lastNotNull", "max"})
}

func timeseriesPanel(title, description, unit string, w uint32, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).Description(description).Unit(unit).
		Height(8).Span(w).Datasource(datasourceRef).
		DrawStyle(common.GraphDrawStyleLine).LineWidth(1).FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).SpanNulls(common.BoolOrFloat64{Bool: cog.ToPtr(false)}).
		AxisSoftMin(0).
		Legend(legendTable()).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		Targets(targets(qs))
}

// stacked is a half-width timeseries with stacked areas (counts by state).
func stacked(title, description string, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseriesPanel(title, description, "short", 12, qs...).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal).Group("A")).
		FillOpacity(40)
}

// statPanel shows the last value of each series; steps and mappings are
// optional (nil: green, no mapping).
func statPanel(title, description, unit string, w uint32, steps []dashboard.Threshold, mappings []dashboard.ValueMapping, qs ...*prometheus.DataqueryBuilder) *stat.PanelBuilder {
	if steps == nil {
		steps = thresholds("green")
	}
	p := stat.NewPanelBuilder().
		Title(title).Description(description).Unit(unit).
		Height(5).Span(w).Datasource(datasourceRef).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)).
		ColorMode(common.BigValueColorModeBackground).GraphMode(common.BigValueGraphModeNone).
		JustifyMode(common.BigValueJustifyModeAuto).TextMode(common.BigValueTextModeAuto).
		Orientation(common.VizOrientationAuto).WideLayout(true).ShowPercentChange(false).
		Targets(targets(qs))
	if mappings != nil {
		p.Mappings(mappings)
	}
	return p
}

// heatmapPanel renders a Prometheus histogram's bucket increases.
func heatmapPanel(title, description, unit string, w uint32, expr string) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().
		Title(title).Description(description).Unit(unit).
		Height(8).Span(w).Datasource(datasourceRef).
		Calculate(false).CellGap(1).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").
			Scale(heatmap.HeatmapColorScaleExponential).Exponent(0.5).Fill("dark-orange").Reverse(false).Steps(64)).
		YAxis(heatmap.NewYAxisConfigBuilder().AxisPlacement(common.AxisPlacementLeft).Unit(unit).Reverse(false)).
		RowsFrame(heatmap.NewRowsHeatmapOptionsBuilder().Layout(common.HeatmapCellLayoutAuto)).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true).ShowColorScale(false)).
		ShowLegend().
		CellValues(heatmap.NewCellValuesBuilder().Unit("short")).
		ExemplarsColor("rgba(255,0,255,0.7)").
		FilterValues(heatmap.NewFilterValueRangeBuilder().Le(1e-9)).
		Targets(targets([]*prometheus.DataqueryBuilder{query(expr, "{{le}}").Format(prometheus.PromQueryFormatHeatmap)}))
}

// stateTimelinePanel shows 0/1 verdicts over time with PASS/FAIL colours.
func stateTimelinePanel(title, description string, w uint32, mappings []dashboard.ValueMapping, qs ...*prometheus.DataqueryBuilder) *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().
		Title(title).Description(description).Unit("bool").
		Height(8).Span(w).Datasource(datasourceRef).
		Mappings(mappings).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(thresholds("red", 1, "green"))).
		FillOpacity(80).LineWidth(0).
		ShowValue(common.VisibilityModeNever).MergeValues(true).RowHeight(0.9).AlignValue(common.TimelineValueAlignmentLeft).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone)).
		Targets(targets(qs))
}

// tablePanel shows instant query results, one row per series.
func tablePanel(title, description, unit string, w uint32, qs ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	return table.NewPanelBuilder().
		Title(title).Description(description).Unit(unit).
		Height(8).Span(w).Datasource(datasourceRef).
		Align(common.FieldTextAlignmentAuto).Filterable(true).
		ShowHeader(true).CellHeight(common.TableCellHeightSm).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"}).Fields([]string{})).
		Targets(targets(qs))
}

// merged joins a table's queries into one table on their common labels.
func merged(p *table.PanelBuilder) *table.PanelBuilder {
	return p.WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}})
}

// thresholds builds absolute threshold steps: the base colour, then
// value, colour pairs.
func thresholds(base string, steps ...any) []dashboard.Threshold {
	out := []dashboard.Threshold{{Color: base}}
	for i := 0; i+1 < len(steps); i += 2 {
		v := toFloat(steps[i])
		out = append(out, dashboard.Threshold{Value: &v, Color: steps[i+1].(string)})
	}
	return out
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case int:
		return float64(n)
	case float64:
		return n
	}
	panic(fmt.Sprintf("threshold value %v is not a number", v))
}

// valueText maps exact values to text and colour.
func valueText(pairs ...choiceColor) []dashboard.ValueMapping {
	opts := map[string]dashboard.ValueMappingResult{}
	for i, p := range pairs {
		opts[p.Value] = dashboard.ValueMappingResult{Text: cog.ToPtr(p.Text), Color: cog.ToPtr(p.Color), Index: cog.ToPtr(int32(i))}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: opts}}}
}

// choiceColor is one value mapping: a value shown as text in a colour.
type choiceColor struct{ Value, Text, Color string }
