package results

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// CompareOptions sets what counts as a regression.
type CompareOptions struct {
	// MaxRegression is the allowed relative growth of p99 (0.10 = 10%).
	MaxRegression float64
	// NoiseSeconds and NoiseCount are absolute growths always tolerated, so
	// a 2 ms → 3 ms change on a laptop is not a regression.
	NoiseSeconds float64
	NoiseCount   float64
}

// Row is one measurement compared.
type Row struct {
	Key                string
	Unit               string
	Baseline, Current  float64
	Change             float64 // relative, e.g. 0.25 = +25%
	Regressed, Missing bool
}

// Compare checks every baseline measurement's p99 in current. Larger is
// worse for every unit the suite records (seconds, requests, conflicts).
func Compare(baseline, current *Results, opts CompareOptions) []Row {
	cur := map[string]Measurement{}
	for _, m := range current.Measurements {
		cur[m.Key()] = m
	}
	var rows []Row
	for _, b := range baseline.Measurements {
		row := Row{Key: b.Key(), Unit: b.Unit, Baseline: b.P99}
		c, ok := cur[b.Key()]
		if !ok {
			row.Missing = true
			rows = append(rows, row)
			continue
		}
		row.Current = c.P99
		if b.P99 != 0 {
			row.Change = (c.P99 - b.P99) / b.P99
		}
		noise := opts.NoiseCount
		if b.Unit == "seconds" {
			noise = opts.NoiseSeconds
		}
		grew := c.P99 - b.P99
		row.Regressed = grew > noise && grew > b.P99*opts.MaxRegression
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Key < rows[j].Key })
	return rows
}

// PrintComparison writes the rows as a table and says whether any regressed.
func PrintComparison(w io.Writer, rows []Row) (regressed bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tUNIT\tBASELINE p99\tCURRENT p99\tCHANGE\tVERDICT")
	for _, r := range rows {
		verdict := "ok"
		switch {
		case r.Missing:
			verdict = "missing"
		case r.Regressed:
			verdict, regressed = "REGRESSION", true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%+.1f%%\t%s\n", r.Key, r.Unit, num(r.Baseline), num(r.Current), r.Change*100, verdict)
	}
	_ = tw.Flush()
	return regressed
}
