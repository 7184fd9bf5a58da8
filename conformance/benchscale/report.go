package benchscale

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
)

// value is a latency measurement of a point: its p50, p99 or single value.
func (p Point) value(name string, pick func(results.Measurement) float64) (float64, bool) {
	for _, m := range p.Results.Measurements {
		if m.Feature == "latency" && m.Name == name && m.Samples > 0 {
			return pick(m), true
		}
	}
	return 0, false
}

func p50(m results.Measurement) float64 { return m.P50 }
func p99(m results.Measurement) float64 { return m.P99 }

// column is one column of the table and, with a plot name, one plot.
type column struct {
	title, measurement string
	pick               func(results.Measurement) float64
	scale              float64 // the value is multiplied by it for display
	format             string
}

var columns = []column{
	{"→PodGroup p99 s", "create_to_podgroup", p99, 1, "%.2f"},
	{"→pods created p50 s", "create_to_pods_created", p50, 1, "%.2f"},
	{"→pods created p99 s", "create_to_pods_created", p99, 1, "%.2f"},
	{"→all bound p99 s", "create_to_all_bound", p99, 1, "%.2f"},
	{"→Ready p50 s", "create_to_status_ready", p50, 1, "%.2f"},
	{"→Ready p99 s", "create_to_status_ready", p99, 1, "%.2f"},
	{"gangs/s", "gangs_per_second", p99, 1, "%.1f"},
	{"makespan s", "burst_makespan", p99, 1, "%.1f"},
	{"API req/gang", "api_requests_per_cluster", p99, 1, "%.1f"},
	{"reconciles/gang", "reconciles_per_cluster", p99, 1, "%.1f"},
	{"409s", "api_conflicts", p99, 1, "%.0f"},
	{"CPU ms/gang", "operator_cpu_per_cluster", p99, 1000, "%.0f"},
	{"RSS max MiB", "operator_rss_max", p99, 1.0 / (1 << 20), "%.0f"},
	{"heap KiB/gang", "operator_heap_per_cluster", p99, 1.0 / (1 << 10), "%.0f"},
	{"longest partial s", "longest_partial_binding", p99, 1, "%.2f"},
}

// plots are the figures, each one or more series of a measurement.
var plots = []struct {
	file, title, unit string
	series            []column
}{
	{"podgroup.svg", "create → PodGroup", "seconds", phaseSeries("create_to_podgroup")},
	{"pods-created.svg", "create → all pods created", "seconds", phaseSeries("create_to_pods_created")},
	{"all-bound.svg", "create → all pods bound", "seconds", phaseSeries("create_to_all_bound")},
	{"pods-ready.svg", "create → all pods Ready", "seconds", phaseSeries("create_to_pods_ready")},
	{"status-ready.svg", "create → GPUCluster Ready", "seconds", phaseSeries("create_to_status_ready")},
	{"gangs-per-second.svg", "creation throughput", "gangs/s", []column{{"gangs/s", "gangs_per_second", p99, 1, ""}}},
	{"api-requests.svg", "API requests per gang", "requests", []column{{"requests", "api_requests_per_cluster", p99, 1, ""}}},
	{"cpu-per-gang.svg", "operator CPU per gang", "CPU ms", []column{{"CPU ms", "operator_cpu_per_cluster", p99, 1000, ""}}},
	{"rss.svg", "operator RSS max", "MiB", []column{{"RSS", "operator_rss_max", p99, 1.0 / (1 << 20), ""}}},
}

func phaseSeries(name string) []column {
	return []column{{"p50", name, p50, 1, ""}, {"p99", name, p99, 1, ""}}
}

// Markdown renders the table of every point and the CPU each process
// spent.
func Markdown(points []Point) string {
	var b strings.Builder
	b.WriteString("| N gangs | nodes | verdict |")
	for _, c := range columns {
		b.WriteString(" " + c.title + " |")
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|", len(columns)) + "\n")
	for _, p := range points {
		fmt.Fprintf(&b, "| %d | %d | %s |", p.N, p.Nodes, p.Results.Verdict)
		for _, c := range columns {
			if v, ok := p.value(c.measurement, c.pick); ok {
				fmt.Fprintf(&b, " "+c.format+" |", v*c.scale)
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	var whole, bursts []procRow
	for _, p := range points {
		if p.CPUSeconds != nil {
			row := procRow{label: strconv.Itoa(p.N), values: map[string]string{}}
			for name, v := range p.CPUSeconds {
				row.values[name] = fmt.Sprintf("%.1f", v)
			}
			whole = append(whole, row)
		}
		if p.Burst != nil {
			bursts = append(bursts, windowRow(strconv.Itoa(p.N), p.N, p.Burst))
		}
		if p.AtRest != nil {
			bursts = append(bursts, windowRow(fmt.Sprintf("%d, at rest", p.N), 0, p.AtRest))
		}
	}
	b.WriteString(processTable("CPU seconds per process during the suite's whole run (2 cores = 2 s per second of wall time; - where the process exited during it)",
		nil, whole))
	b.WriteString(processTable("While the gangs came up, from the first create to the last Ready, and at rest before the run: the window, "+
		"the machine's idle CPU, the busy CPU per gang of all processes, and each process's share of the machine",
		[]string{"window s", "idle", "busy CPU s/gang"}, bursts))
	b.WriteString(requestTable(points))
	return b.String()
}

// procRow is one row of a per-process table: its first cell, the cells
// before the processes, and a cell per process.
type procRow struct {
	label  string
	lead   []string
	values map[string]string
}

// windowRow renders a CPU window of n gangs (0: none, no per-gang cell).
func windowRow(label string, n int, b *bench.CPUWindow) procRow {
	perGang := "-"
	if n > 0 {
		perGang = fmt.Sprintf("%.2f", b.MachineSeconds*(1-b.Idle)/float64(n))
	}
	row := procRow{label: label, lead: []string{fmt.Sprintf("%.1f", b.Seconds), fmt.Sprintf("%.0f%%", 100*b.Idle), perGang}, values: map[string]string{}}
	for name, v := range b.CPUSeconds {
		if b.MachineSeconds > 0 {
			row.values[name] = fmt.Sprintf("%.0f%%", 100*v/b.MachineSeconds)
		}
	}
	return row
}

// processTable renders rows of the lead columns (titled leadTitles) and a
// cell per process, "-" where a row has none; nothing without rows.
func processTable(title string, leadTitles []string, rows []procRow) string {
	if len(rows) == 0 {
		return ""
	}
	procs := map[string]bool{}
	for _, r := range rows {
		for name := range r.values {
			procs[name] = true
		}
	}
	names := slices.Sorted(maps.Keys(procs))
	var b strings.Builder
	b.WriteString("\n" + title + ":\n\n| N gangs |")
	for _, n := range append(slices.Clone(leadTitles), names...) {
		b.WriteString(" " + n + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(leadTitles)+len(names)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + r.label + " |")
		for _, c := range r.lead {
			b.WriteString(" " + c + " |")
		}
		for _, n := range names {
			v, ok := r.values[n]
			if !ok {
				v = "-"
			}
			b.WriteString(" " + v + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// topRequestKinds is how many request kinds the API server table shows.
const topRequestKinds = 15

// requestTable renders what the API server served per gang, the kinds
// most served at the largest N first.
func requestTable(points []Point) string {
	var last *Point
	for i := range points {
		if points[i].APIRequests != nil {
			last = &points[i]
		}
	}
	if last == nil {
		return ""
	}
	kinds := slices.SortedFunc(maps.Keys(last.APIRequests), func(a, b string) int {
		return cmp.Or(cmp.Compare(last.APIRequests[b], last.APIRequests[a]), strings.Compare(a, b))
	})
	kinds = kinds[:min(len(kinds), topRequestKinds)]
	var b strings.Builder
	b.WriteString("\nWhat the API server served during the run, per gang (all clients; \"watch events\" are events sent to watchers):\n\n| request |")
	for _, p := range points {
		fmt.Fprintf(&b, " N=%d |", p.N)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(points)) + "\n")
	for _, k := range kinds {
		b.WriteString("| " + k + " |")
		for _, p := range points {
			if v, ok := p.APIRequests[k]; ok {
				fmt.Fprintf(&b, " %.1f |", v/float64(p.N))
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// WriteReport writes report.md and the plots into dir.
func WriteReport(dir string, points []Point) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# gpulab operator scaling, %s\n\nN gangs (1 head + 2 workers x 4 GPUs) created at once on a local testbed of ~1.25 N nodes, "+
		"one testbed per N; the operator at its defaults (%d reconcile workers, QPS %d / burst %d), pprof on. Profiles are in n-<N>/.\n\n%s\n",
		time.Now().UTC().Format("2006-01-02"), profile.ReconcileConcurrency, profile.OperatorQPS, profile.OperatorBurst, Markdown(points))
	for _, pl := range plots {
		var series []Series
		for _, c := range pl.series {
			s := Series{Name: c.title}
			for _, p := range points {
				if v, ok := p.value(c.measurement, c.pick); ok {
					s.Points = append(s.Points, XY{X: float64(p.N), Y: v * c.scale})
				}
			}
			series = append(series, s)
		}
		svg := Plot(pl.title, "N gangs (log)", pl.unit, series)
		if err := os.WriteFile(filepath.Join(dir, pl.file), []byte(svg), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&b, "![%s](%s)\n", pl.title, pl.file)
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}
