package results

import (
	"fmt"
	"html/template"
	"strings"
)

// HTML renders report.html: the verdicts and, for every latency
// measurement, a bar chart of its p50/p90/p99/max, drawn as inline SVG so
// the page needs nothing but a browser.
func (r *Results) HTML() ([]byte, error) {
	var b strings.Builder
	err := htmlPage.Execute(&b, struct {
		*Results
		Verdict  Verdict
		Evidence []Evidence
		Charts   []template.HTML
	}{r, r.RunVerdict(), KAREvidence(r.Features, r.Requested...), append(charts(r), timelines(r)...)})
	return []byte(b.String()), err
}

// statusClass colours a status cell.
func statusClass(s Status) string {
	switch s {
	case StatusPassed:
		return "pass"
	case StatusFailed:
		return "fail"
	case StatusNotTested:
		return "none"
	default:
		return "partial"
	}
}

// charts draws one horizontal bar chart per unit, a row per measurement.
func charts(r *Results) []template.HTML {
	byUnit := map[string][]Measurement{}
	var units []string
	for _, m := range r.Measurements {
		if m.Samples == 0 {
			continue
		}
		if _, ok := byUnit[m.Unit]; !ok {
			units = append(units, m.Unit)
		}
		byUnit[m.Unit] = append(byUnit[m.Unit], m)
	}
	var out []template.HTML
	for _, unit := range units {
		ms := byUnit[unit]
		top := 0.0
		for _, m := range ms {
			top = max(top, m.Max)
		}
		if top == 0 {
			top = 1
		}
		const label, width, row, bar = 300, 500, 34, 7
		var svg strings.Builder
		fmt.Fprintf(&svg, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" aria-label="%s">`, label+width+90, row*len(ms)+30, template.HTMLEscapeString(unit))
		for i, m := range ms {
			y := i*row + 10
			fmt.Fprintf(&svg, `<text x="0" y="%d" font-size="12">%s</text>`, y+14, template.HTMLEscapeString(m.Key()))
			for j, q := range []struct {
				v     float64
				color string
			}{{m.P50, "#4c78a8"}, {m.P90, "#72b7b2"}, {m.P99, "#f58518"}, {m.Max, "#e45756"}} {
				w := int(q.v / top * width)
				fmt.Fprintf(&svg, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s %s: %s</title></rect>`,
					label, y+j*bar, max(w, 1), bar-1, q.color, m.Key(), []string{"p50", "p90", "p99", "max"}[j], num(q.v))
			}
			fmt.Fprintf(&svg, `<text x="%d" y="%d" font-size="11">p99 %s</text>`, label+width+5, y+20, num(m.P99))
		}
		fmt.Fprintf(&svg, `<text x="%d" y="%d" font-size="11">bars: p50, p90, p99, max (%s)</text></svg>`, label, row*len(ms)+25, template.HTMLEscapeString(unit))
		out = append(out, template.HTML(svg.String())) //nolint:gosec // built from escaped text and numbers above
	}
	return out
}

var htmlPage = template.Must(template.New("report").Funcs(template.FuncMap{"class": statusClass, "featureStatus": FeatureStatus}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpulab conformance: {{.Verdict}}</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.fail{color:#c00;font-weight:bold}.partial{color:#b60;font-weight:bold}.pass{color:#080}.none{color:#777}</style>
</head><body>
<h1>gpulab conformance: <span class="{{if eq .Verdict "PASSED"}}pass{{else if eq .Verdict "PARTIAL"}}partial{{else}}fail{{end}}">{{.Verdict}}</span></h1>
<p>profile <b>{{.Environment.Profile}}</b>, workload <b>{{.Environment.WorkloadName}}</b>, Kubernetes {{.Environment.KubernetesVersion}}, Volcano {{.Environment.VolcanoVersion}},
{{.Environment.Nodes}} nodes, scale {{.Environment.Scale}}, {{.StartTime.Format "2006-01-02 15:04:05 MST"}}</p>
<h2>Features</h2>
{{if not .Features}}<p class="fail">No assessment ran: nothing was tested.</p>{{end}}
<table><tr><th>feature</th><th>assessment</th><th>requirement</th><th>result</th><th>seconds</th><th>reason</th></tr>
{{range .Features}}{{$s := featureStatus .Assessments}}<tr><td><b>{{.Name}}</b></td><td></td><td></td><td class="{{class $s}}">{{$s}}</td><td>{{printf "%.1f" .Seconds}}</td><td></td></tr>
{{range .Assessments}}<tr><td></td><td>{{.Name}}</td><td>{{.Requirement}}</td><td class="{{class .Status}}">{{.Status}}</td><td>{{printf "%.1f" .Seconds}}</td><td>{{if .Messages}}{{range .Messages}}{{.}}<br>{{end}}{{else}}{{.Reason}}{{end}}</td></tr>
{{end}}{{end}}</table>
<h2>KAR evidence</h2>
<table><tr><th>requirement</th><th>KAR</th><th>verdict</th><th>assessments</th></tr>
{{range .Evidence}}<tr><td>{{.Requirement}}</td><td>{{or .KAR "-"}}</td><td class="{{class .Status}}">{{.Status}}</td><td>{{range .Assessments}}{{.}}<br>{{end}}</td></tr>
{{end}}</table>
<h2>Measurements</h2>
{{range .Charts}}<div>{{.}}</div>{{end}}
</body></html>
`))

// timelines draws, per feature, each cluster as a row from its create to
// status Ready, coloured by phase: waiting for the PodGroup and pods, for
// binding, for pods Ready, for the operator to report Ready. A contended run
// shows as a staircase: gangs binding as room frees.
func timelines(r *Results) []template.HTML {
	byFeature := map[string][]Timeline{}
	var features []string
	for _, t := range r.Timelines {
		if _, ok := byFeature[t.Feature]; !ok {
			features = append(features, t.Feature)
		}
		byFeature[t.Feature] = append(byFeature[t.Feature], t)
	}
	var out []template.HTML
	for _, f := range features {
		ts := byFeature[f]
		end := 0.0
		for _, t := range ts {
			end = max(end, t.Start+t.StatusReady)
		}
		if end <= 0 {
			continue
		}
		const width, row, left = 800, 4, 10
		var svg strings.Builder
		fmt.Fprintf(&svg, `<h3>%s: per-cluster timeline (%d clusters, %.1f s)</h3><svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">`,
			template.HTMLEscapeString(f), len(ts), end, width+2*left, row*len(ts)+40)
		x := func(sec float64) int { return left + int(sec/end*width) }
		for i, t := range ts {
			y := 20 + i*row
			prev := t.Start
			for _, seg := range []struct {
				at    float64
				color string
			}{{t.PodsCreated, "#bab0ac"}, {t.AllBound, "#f58518"}, {t.PodsReady, "#72b7b2"}, {t.StatusReady, "#4c78a8"}} {
				if seg.at < 0 {
					continue
				}
				at := t.Start + seg.at
				fmt.Fprintf(&svg, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, x(prev), y, max(x(at)-x(prev), 1), row-1, seg.color)
				prev = at
			}
		}
		fmt.Fprintf(&svg, `<text x="%d" y="12" font-size="11">grey: create→pods created, orange: →all bound, teal: →pods Ready, blue: →status Ready; 0 to %.1f s</text></svg>`, left, end)
		out = append(out, template.HTML(svg.String())) //nolint:gosec // built from escaped text and numbers
	}
	return out
}
