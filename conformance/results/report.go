package results

import (
	"encoding/xml"
	"fmt"
	"sort"
	"strings"
)

type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name    string        `xml:"name,attr"`
	Class   string        `xml:"classname,attr"`
	Time    float64       `xml:"time,attr"`
	Failure *junitFailure `xml:"failure,omitempty"`
	Skipped *junitSkipped `xml:"skipped,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

// JUnit renders a test case per assessment, its feature as the class, with
// the skip reason or the failures.
func (r *Results) JUnit() ([]byte, error) {
	s := junitSuite{Name: "gpulab-conformance/" + r.Environment.Profile}
	for _, f := range r.Features {
		for _, a := range f.Assessments {
			c := junitCase{Name: a.Name, Class: f.Name, Time: a.Seconds}
			switch a.Status {
			case StatusPassed:
			case StatusSkipped:
				c.Skipped = &junitSkipped{Message: a.Reason}
				s.Skipped++
			default:
				text := strings.Join(a.Messages, "\n")
				if text == "" {
					text = a.Reason
				}
				c.Failure = &junitFailure{Message: a.Reason, Text: text}
				s.Failures++
			}
			s.Tests++
			s.Time += a.Seconds
			s.Cases = append(s.Cases, c)
		}
	}
	out, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(out, '\n')...), nil
}

// Markdown renders a report for terminals and CI summaries: the verdict,
// each feature and assessment, the KAR evidence, the measurements.
func (r *Results) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# gpulab conformance: %s\n\n", r.RunVerdict())
	e := r.Environment
	fmt.Fprintf(&b, "profile `%s`, workload `%s`, Kubernetes %s, Volcano %s, %d nodes, GPUs %s, scale %d, %s\n\n",
		e.Profile, e.WorkloadName(), orDash(e.KubernetesVersion), orDash(e.VolcanoVersion), e.Nodes, gpus(e.GPUsByProduct), e.Scale, r.EndTime.Sub(r.StartTime).Round(1e9))
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "**Warning:** %s\n\n", w)
	}
	if len(r.Features) == 0 {
		b.WriteString("No assessment ran: nothing was tested.\n\n")
	}
	b.WriteString("| feature | assessment | requirement | result | seconds | reason |\n|---|---|---|---|---|---|\n")
	for _, f := range r.Features {
		fmt.Fprintf(&b, "| **%s** | | | %s | %.1f | |\n", cell(f.Name), result(FeatureStatus(f.Assessments)), f.Seconds)
		for _, a := range f.Assessments {
			reason := a.Reason
			if len(a.Messages) > 1 {
				reason = strings.Join(a.Messages, "; ")
			}
			fmt.Fprintf(&b, "| | %s | %s | %s | %.1f | %s |\n", cell(a.Name), a.Requirement, result(a.Status), a.Seconds, cell(reason))
		}
	}
	b.WriteString("\n## KAR evidence\n\n| requirement | KAR | verdict | assessments |\n|---|---|---|---|\n")
	for _, ev := range KAREvidence(r.Features, r.Requested...) {
		verdict := result(ev.Status)
		switch {
		case ev.Requested && ev.Status == StatusNotTested:
			verdict = "*not tested, asked for*"
		case r.RequirementsSelected && !ev.Requested:
			verdict += " (not selected by --requirements)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", ev.Requirement, orDash(ev.KAR), verdict, cell(strings.Join(ev.Assessments, "; ")))
	}
	if len(r.Measurements) > 0 {
		b.WriteString("\n| measurement | unit | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n")
		for _, m := range r.Measurements {
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s |\n", m.Key(), m.Unit, m.Samples, num(m.P50), num(m.P90), p99Cell(m), num(m.Max))
		}
	}
	return b.String()
}

// result is a status as a report cell: what did not pass stands out.
func result(s Status) string {
	switch s {
	case StatusPassed, StatusNotTested:
		return s.String()
	case StatusFailed:
		return "**FAILED**"
	default:
		return "*" + s.String() + "*"
	}
}

// cell keeps text on one Markdown table row.
func cell(s string) string {
	return strings.NewReplacer("|", "/", "\n", " ").Replace(s)
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.3f", v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func gpus(by map[string]int) string {
	if len(by) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d× %s", by[k], k))
	}
	return strings.Join(parts, ", ")
}

// MinSamplesForP99 is the fewest samples whose nearest-rank p99 is not
// simply their maximum.
const MinSamplesForP99 = 100

// HasP99 says whether m's p99 is a p99: a distribution of fewer than
// MinSamplesForP99 samples has only a maximum there.
func (m Measurement) HasP99() bool { return m.Samples == 1 || m.Samples >= MinSamplesForP99 }

// p99Cell is m's p99, or its maximum labelled so where there are too few
// samples for a p99.
func p99Cell(m Measurement) string {
	if m.HasP99() {
		return num(m.P99)
	}
	return fmt.Sprintf("max %s (n<%d)", num(m.Max), MinSamplesForP99)
}
