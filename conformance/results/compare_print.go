package results

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// PrintComparison writes where both sides came from, the test, what the
// runs differ in (when allowed), the measurements as a table, what is
// missing and which current features did not pass, and a last line with
// the outcome. It returns whether the comparison failed.
func PrintComparison(w io.Writer, c Comparison) (failed bool) {
	fmt.Fprintf(w, "baseline: %s\n", c.Baseline)
	fmt.Fprintf(w, "current:  %s\n", c.Current)
	if c.Test != "" {
		fmt.Fprintf(w, "test:     %s\n", c.Test)
	}
	for _, d := range c.Differences {
		fmt.Fprintf(w, "differs (compared anyway): %s\n", d)
	}
	fmt.Fprintln(w)
	missing := "MISSING"
	if c.AllowMissing {
		missing = "missing (allowed)"
	}
	stat := cmp.Or(c.Statistic, DefaultStatistic)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "MEASUREMENT\tUNIT\tBETTER\tRUNS B/C\tBASELINE %s\tCURRENT %s\tCHANGE\t%s INTERVAL\tMIN EFFECT\tVERDICT\n",
		stat, stat, percent0(cmp.Or(c.Confidence, DefaultConfidence)))
	for _, r := range c.Rows {
		runs := fmt.Sprintf("%d/%d", r.BaselineRuns, r.CurrentRuns)
		if r.Missing {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t-\t-\t-\t%s\t%s\n", r.Key, r.Unit, r.Direction(), runs, num(r.Baseline), percent0(r.MinEffect), missing)
			continue
		}
		verdict := string(r.Verdict)
		switch {
		case r.Verdict == RowRegressed && r.Gated:
			verdict = "REGRESSION"
		case r.Verdict == RowRegressed:
			verdict = "regressed (not gated)"
		}
		if r.Note != "" {
			verdict += " (" + r.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Key, r.Unit, r.Direction(), runs,
			num(r.Baseline), num(r.Current), percent(r.Change), r.Interval(), percent0(r.MinEffect), verdict)
	}
	_ = tw.Flush()
	for _, f := range c.MissingFeatures {
		fmt.Fprintf(w, "feature %s: %s\n", f, missing)
	}
	for _, a := range c.MissingAssessments {
		fmt.Fprintf(w, "assessment %s: %s\n", a, missing)
	}
	for _, f := range c.NotPassed {
		fmt.Fprintf(w, "feature %s %s: %s\n", f.Name, f.Status, strings.Join(f.Messages, "; "))
	}
	failed = c.Failed()
	if failed {
		allowed := ""
		if c.AllowMissing {
			allowed = " (allowed)"
		}
		fmt.Fprintf(w, "comparison: FAILED (%d regressed, %d missing%s, %d failed features)\n",
			c.Regressions(), c.Missing(), allowed, c.FailedFeatures())
	} else {
		fmt.Fprintf(w, "comparison: ok (%d improved, %d not significant, %d unchanged)\n",
			c.count(RowImproved), c.count(RowNotSignificant), c.count(RowUnchanged))
	}
	return failed
}

// percent is a signed percentage with one decimal: +12.5%, -3.0%, +inf%.
func percent(v float64) string {
	if math.IsInf(v, 0) {
		if v > 0 {
			return "+inf%"
		}
		return "-inf%"
	}
	return fmt.Sprintf("%+.1f%%", v*100)
}

// percent0 is an unsigned percentage without needless decimals: 15%, 2.5%.
func percent0(v float64) string {
	return strconv.FormatFloat(math.Round(v*100*1000)/1000, 'f', -1, 64) + "%"
}

// String is one line naming the side: how many runs, profile, workload,
// cluster, suite and operator builds, scheduler, host and start, each
// "unknown" where the runs did not record it.
func (p Provenance) String() string {
	e := p.Environment
	start := "unknown"
	if !p.StartTime.IsZero() {
		start = p.StartTime.UTC().Format(time.RFC3339)
		if !p.LastStartTime.IsZero() && !p.LastStartTime.Equal(p.StartTime) {
			start += " to " + p.LastStartTime.UTC().Format(time.RFC3339)
		}
	}
	runs := ""
	if p.Runs > 1 {
		runs = fmt.Sprintf("%d runs, ", p.Runs)
	}
	if e.MergedRuns > 0 {
		runs += fmt.Sprintf("a median of %d runs, ", e.MergedRuns)
	}
	scheduler := e.SchedulerName()
	if e.SchedulerVersion != "" {
		scheduler += " " + e.SchedulerVersion
	}
	return fmt.Sprintf("%sprofile %s, workload %s, scale %d, cluster %s, suite %s (commit %s), operator %s (commit %s), scheduler %s, host %s, started %s",
		runs, orUnknown(e.Profile), e.WorkloadName(), e.Scale, orUnknown(e.ClusterName), orUnknown(e.SuiteVersion), orUnknown(e.SuiteCommit),
		orUnknown(e.OperatorVersion), orUnknown(e.OperatorCommit), scheduler, e.Host, start)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
