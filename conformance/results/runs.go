package results

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ResultsFile is the name of a run's results in its output directory.
const ResultsFile = "results.json"

// Run is one run's results and the path they were read from.
type Run struct {
	Path string
	*Results
}

// Runs wraps results that were not read from files (tests, tools that
// built them), naming each "run N".
func Runs(rs ...*Results) []Run {
	out := make([]Run, len(rs))
	for i, r := range rs {
		out[i] = Run{Path: fmt.Sprintf("run %d", i+1), Results: r}
	}
	return out
}

// ReadBaseline reads the runs path names (a results.json, or a directory
// of runs as ReadRuns reads it), for the band pushed beside a run; an
// empty path names none.
func ReadBaseline(path string) ([]*Results, error) {
	if path == "" {
		return nil, nil
	}
	runs, _, err := ReadRuns(path)
	if err != nil {
		return nil, fmt.Errorf("reading the baseline %s: %w", path, err)
	}
	out := make([]*Results, len(runs))
	for i, r := range runs {
		out[i] = r.Results
	}
	return out, nil
}

// ReadRuns reads the runs that paths name. A file is read as it is. A
// directory stands for every file named results.json under it, at any
// depth, in lexical order of their paths; merged results (the output of
// median, MergedRuns > 0) are skipped there and returned in skipped, so a
// nightly's directory, which holds its runs and their median, counts each
// run once. A directory without any run is an error.
func ReadRuns(paths ...string) (runs []Run, skipped []string, err error) {
	for _, path := range paths {
		info, err := os.Stat(path)
		if err != nil {
			return nil, nil, err
		}
		if !info.IsDir() {
			r, err := Read(path)
			if err != nil {
				return nil, nil, err
			}
			runs = append(runs, Run{Path: path, Results: r})
			continue
		}
		var found []string
		err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && d.Name() == ResultsFile {
				found = append(found, p)
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		n := 0
		for _, p := range found { // WalkDir walks in lexical order
			r, err := Read(p)
			if err != nil {
				return nil, nil, err
			}
			if r.Environment.MergedRuns > 0 {
				skipped = append(skipped, fmt.Sprintf("%s (a median of %d runs)", p, r.Environment.MergedRuns))
				continue
			}
			runs = append(runs, Run{Path: p, Results: r})
			n++
		}
		if n == 0 {
			return nil, nil, fmt.Errorf("%s: no %s of a run under it", path, ResultsFile)
		}
	}
	if len(runs) == 0 {
		return nil, nil, errors.New("no runs named")
	}
	return runs, skipped, nil
}

// Difference is one property that keeps runs from being compared: between
// the two sides, or between runs of one side.
type Difference struct {
	// Field is what differs: profile, workload, scale N, scheduler, host
	// CPUs, host CPU model or host memory.
	Field string
	// Side is "" between baseline and current, else the side ("baseline"
	// or "current") whose runs differ among themselves.
	Side string
	// A and B are the two values, each prefixed with whose it is (a side,
	// or a run's path).
	A, B string
}

func (d Difference) String() string {
	if d.Side == "" {
		return fmt.Sprintf("%s: %s, %s", d.Field, d.A, d.B)
	}
	return fmt.Sprintf("%s runs differ in %s: %s, %s", d.Side, d.Field, d.A, d.B)
}

// IncomparableError is the refusal to compare runs that differ in what
// decides their numbers.
type IncomparableError struct{ Differences []Difference }

func (e *IncomparableError) Error() string {
	lines := make([]string, len(e.Differences))
	for i, d := range e.Differences {
		lines[i] = "  " + d.String()
	}
	return "the runs are not comparable:\n" + strings.Join(lines, "\n")
}

// comparableFields are what two runs must share for their numbers to be
// compared. A host that was not recorded (older results) differs from one
// that was; two unrecorded hosts are alike.
var comparableFields = []struct {
	name  string
	value func(Environment) string
}{
	{"profile", func(e Environment) string { return orNone(e.Profile) }},
	{"workload", Environment.WorkloadName},
	{"scale N", func(e Environment) string { return fmt.Sprint(e.Scale) }},
	{"scheduler", Environment.SchedulerName},
	{"GPU allocation", Environment.GPUAllocationName},
	{"host CPUs", func(e Environment) string {
		return hostValue(e.Host, func(h Host) string { return fmt.Sprint(h.CPUs) })
	}},
	{"host CPU model", func(e Environment) string {
		return hostValue(e.Host, func(h Host) string { return orNone(h.CPUModel) })
	}},
	{"host memory", func(e Environment) string {
		return hostValue(e.Host, func(h Host) string { return fmt.Sprintf("%d GiB", h.MemoryGiB()) })
	}},
}

func hostValue(h Host, value func(Host) string) string {
	if !h.Recorded() {
		return "(not recorded)"
	}
	return value(h)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Differences lists what keeps the runs from being compared: each run of a
// side that differs from the side's first run, then each way the sides'
// first runs differ. Scale, workload, profile, scheduler and host class
// (CPU count, CPU model, memory in GiB) must match; versions, kernel and
// cluster name may change, since measuring such changes is the point.
func Differences(baseline, current []Run) []Difference {
	var out []Difference
	within := func(side string, runs []Run) {
		for _, r := range runs[1:] {
			for _, f := range comparableFields {
				a, b := f.value(runs[0].Environment), f.value(r.Environment)
				if a != b {
					out = append(out, Difference{Field: f.name, Side: side, A: runs[0].Path + " " + a, B: r.Path + " " + b})
				}
			}
		}
	}
	if len(baseline) > 0 {
		within("baseline", baseline)
	}
	if len(current) > 0 {
		within("current", current)
	}
	if len(baseline) == 0 || len(current) == 0 {
		return out
	}
	for _, f := range comparableFields {
		a, b := f.value(baseline[0].Environment), f.value(current[0].Environment)
		if a != b {
			out = append(out, Difference{Field: f.name, A: "baseline " + a, B: "current " + b})
		}
	}
	return out
}
