package sidebyside

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpulab/gpulab/conformance/results"
)

// scaleRuns are one scale's counted runs: each side's results and the CPU
// the testbed's processes spent during them.
type scaleRuns struct {
	results map[string][]*results.Results
	cpu     processCPU
}

// processCPU is, per side and process, the CPU seconds of each counted
// run: where the machine's time went while that side ran, the API server's
// and the scheduler's included, which the operators' own metrics do not
// show.
type processCPU map[string]map[string][]float64

func (p processCPU) add(side string, seconds map[string]float64) {
	if p[side] == nil {
		p[side] = map[string][]float64{}
	}
	for name, s := range seconds {
		p[side][name] = append(p[side][name], s)
	}
}

// markdown is a table of processes by side, each cell the range over the
// rounds, the processes in name order.
func (p processCPU) markdown(sides []Side) string {
	names := map[string]bool{}
	for _, bySide := range p {
		for name := range bySide {
			names[name] = true
		}
	}
	var b strings.Builder
	b.WriteString("| PROCESS |")
	for _, s := range sides {
		b.WriteString(" " + s.Label + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(sides)) + "\n")
	for _, name := range slices.Sorted(maps.Keys(names)) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, s := range sides {
			if vs := p[s.Key][name]; len(vs) > 0 {
				b.WriteString(" " + span(vs) + " |")
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
