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
	Skipped *struct{}     `xml:"skipped,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// JUnit renders the features as a JUnit test suite for CI systems.
func (r *Results) JUnit() ([]byte, error) {
	s := junitSuite{Name: "gpulab-conformance/" + r.Environment.Profile}
	for _, f := range r.Features {
		c := junitCase{Name: f.Name, Class: "gpulab.conformance", Time: f.Seconds}
		switch {
		case f.Skipped:
			c.Skipped = &struct{}{}
			s.Skipped++
		case !f.Passed:
			msg := "failed"
			if len(f.Messages) > 0 {
				msg = f.Messages[0]
			}
			c.Failure = &junitFailure{Message: msg, Text: strings.Join(f.Messages, "\n")}
			s.Failures++
		}
		s.Tests++
		s.Time += f.Seconds
		s.Cases = append(s.Cases, c)
	}
	out, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(out, '\n')...), nil
}

// Markdown renders a report for terminals and CI summaries.
func (r *Results) Markdown() string {
	var b strings.Builder
	verdict := "PASSED"
	if !r.Passed() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "# gpulab conformance: %s\n\n", verdict)
	e := r.Environment
	fmt.Fprintf(&b, "profile `%s`, Kubernetes %s, Volcano %s, %d nodes, GPUs %s, scale %d, %s\n\n",
		e.Profile, e.KubernetesVersion, orDash(e.VolcanoVersion), e.Nodes, gpus(e.GPUsByProduct), e.Scale, r.EndTime.Sub(r.StartTime).Round(1e9))
	b.WriteString("| feature | result | seconds | notes |\n|---|---|---|---|\n")
	for _, f := range r.Features {
		res := "pass"
		switch {
		case f.Skipped:
			res = "skip"
		case !f.Passed:
			res = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %s |\n", f.Name, res, f.Seconds, strings.ReplaceAll(strings.Join(f.Messages, "; "), "|", "/"))
	}
	if len(r.Measurements) > 0 {
		b.WriteString("\n| measurement | unit | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|\n")
		for _, m := range r.Measurements {
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s |\n", m.Key(), m.Unit, m.Samples, num(m.P50), num(m.P90), num(m.P99), num(m.Max))
		}
	}
	return b.String()
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
