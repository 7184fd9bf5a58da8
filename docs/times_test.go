package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// duration matches a time the docs could quote about how long something
// takes: 18m33s, 6m41s, 21 min, 8.5–10.5 minutes, 2 hours. Seconds alone
// (51 s) are not matched: the pages quote measured latencies in seconds
// (13.5 s at p99), results rather than build or test times.
var duration = regexp.MustCompile(`\b\d+m\d+s\b|\b\d+(?:[.,]\d+)?(?:[–-]\d+(?:[.,]\d+)?)?\s?(?:min|minutes|hours?)\b`)

// Every build, test or CI time the README and the getting-started pages
// quote is one measured, dated and with its machine, on the testing page:
// times in two places drift apart. The README stays short enough to read
// (under 250 lines).
func TestReadmeTimesAreMeasured(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	testing, err := os.ReadFile(filepath.Join(root, "docs/development/testing.md"))
	if err != nil {
		t.Fatal(err)
	}
	measured := string(testing)
	if !strings.Contains(measured, "## Measured times") {
		t.Fatal("docs/development/testing.md has no Measured times section")
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs/getting-started/*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no getting-started pages (%v)", err)
	}
	for _, page := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		for i, line := range strings.Split(string(text), "\n") {
			for _, d := range duration.FindAllString(line, -1) {
				if !strings.Contains(measured, d) {
					t.Errorf("%s:%d quotes %q, which docs/development/testing.md does not measure", name, i+1, d)
				}
			}
		}
	}
	if n := strings.Count(string(readme), "\n"); n >= 250 {
		t.Errorf("README.md is %d lines, want under 250: move details into docs/", n)
	}
	if !strings.Contains(string(readme), "docs/development/testing.md#measured-times") {
		t.Error("README.md does not link the measured times")
	}
	// Install comes before the run: the run needs what the install puts there.
	install, run := strings.Index(string(readme), "## Install gpulab"), strings.Index(string(readme), "## Run on your GPU cluster")
	if install < 0 || run < 0 || install > run {
		t.Errorf("README.md: install at %d, run at %d; want the install first", install, run)
	}
}

// The pattern finds the forms it is meant to, so the test above cannot
// pass by matching nothing.
func TestDurationPattern(t *testing.T) {
	for _, s := range []string{"18m33s", "21 min", "8.5–10.5 minutes", "67 minutes", "2 hours"} {
		if got := duration.FindString("took " + s + " in all"); got != s {
			t.Errorf("%q: matched %q", s, got)
		}
	}
	for _, s := range []string{"13.5 s at p99", "51 s", "v1.37.2", "1.34x"} {
		if got := duration.FindString(s); got != "" {
			t.Errorf("%q: matched %q, not a build or test time", s, got)
		}
	}
}

// commitHash is a page naming the commit it measured: "commit 0b8d969",
// "Commit 7982e64 (...", "| commit | 2a5837a".
var commitHash = regexp.MustCompile(`(?i)\bcommit\b[^.\n]{0,40}?\b[0-9a-f]{7,40}\b`)

// Every dated benchmark page names its commit, as docs/benchmarks/README.md
// says, so its numbers can be traced to the code that made them.
func TestBenchmarkPagesNameTheirCommit(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs/benchmarks/20*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no dated benchmark pages (%v)", err)
	}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if !commitHash.Match(text) {
			t.Errorf("%s names no commit", filepath.Base(page))
		}
	}
}
