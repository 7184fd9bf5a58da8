package docs

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/gpulab/gpulab/conformance/cli"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/conformance/cli.md")

// root is the repository root, one folder up from this package.
const root = ".."

// page is one Markdown file, split into prose and code.
type page struct {
	path  string // relative to the repository root
	lines []string
	// fenced[i] says whether line i is inside a fenced code block (the
	// fence lines included).
	fenced []bool
}

// pages are the Markdown files the test checks: the root README and
// CONTRIBUTING, every page under docs/, and the component READMEs.
func pages(t *testing.T) []*page {
	t.Helper()
	paths := []string{"README.md", "CONTRIBUTING.md", "charts/gpulab/README.md", "node-agent/README.md", "dashboards/README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []*page
	for _, p := range paths {
		out = append(out, readPage(t, p))
	}
	return out
}

func readPage(t *testing.T, rel string) *page {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	pg := &page{path: rel, lines: strings.Split(string(data), "\n")}
	in := false
	for _, l := range pg.lines {
		fence := strings.HasPrefix(strings.TrimSpace(l), "```")
		pg.fenced = append(pg.fenced, in || fence)
		if fence {
			in = !in
		}
	}
	return pg
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// prose is the page without fenced blocks and inline code, line by line.
func (pg *page) prose() []string {
	out := make([]string, len(pg.lines))
	for i, l := range pg.lines {
		if !pg.fenced[i] {
			out[i] = inlineCode.ReplaceAllString(l, "")
		}
	}
	return out
}

// snippet is a piece of code on a page: a fenced command (continuation
// lines joined) or an inline code span.
type snippet struct {
	line  int // 1-based
	text  string
	fence bool
}

func (s snippet) String() string { return fmt.Sprintf("line %d: %s", s.line, s.text) }

func (pg *page) code() []snippet {
	var out []snippet
	for i := 0; i < len(pg.lines); i++ {
		l := pg.lines[i]
		if pg.fenced[i] {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				continue
			}
			start, text := i, l
			for strings.HasSuffix(strings.TrimRight(text, " "), `\`) && i+1 < len(pg.lines) && pg.fenced[i+1] {
				i++
				text = strings.TrimSuffix(strings.TrimRight(text, " "), `\`) + " " + strings.TrimSpace(pg.lines[i])
			}
			out = append(out, snippet{line: start + 1, text: text, fence: true})
			continue
		}
		for _, m := range inlineCode.FindAllString(l, -1) {
			out = append(out, snippet{line: i + 1, text: strings.Trim(m, "`")})
		}
	}
	return out
}

// blocks are the fenced code blocks of a page, each as one text.
func (pg *page) blocks() []snippet {
	var out []snippet
	var cur []string
	start := 0
	for i, l := range pg.lines {
		if !pg.fenced[i] {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if cur != nil {
				out = append(out, snippet{line: start + 1, text: strings.Join(cur, "\n"), fence: true})
				cur = nil
			} else {
				cur, start = []string{}, i
			}
			continue
		}
		cur = append(cur, l)
	}
	return out
}

// anchors are the GitHub anchors of a page's headings.
func (pg *page) anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for i, l := range pg.lines {
		if pg.fenced[i] || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		a := slug(text)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading: links become their text,
// lower case, punctuation dropped, spaces become hyphens.
func slug(heading string) string {
	heading = mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var linkTarget = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestLinks: every relative link on every page points at a file or folder
// that exists, and every #anchor at a heading of the page it names.
func TestLinks(t *testing.T) {
	all := pages(t)
	byPath := map[string]*page{}
	for _, pg := range all {
		byPath[pg.path] = pg
	}
	checked := 0
	for _, pg := range all {
		for i, l := range pg.prose() {
			for _, m := range linkTarget.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				rel := pg.path
				if file != "" {
					rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(pg.path), file)))
					if strings.HasPrefix(rel, "../") {
						t.Errorf("%s:%d: link %q leaves the repository", pg.path, i+1, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", pg.path, i+1, target, rel)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(rel, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", pg.path, i+1, target)
					continue
				}
				to := byPath[rel]
				if to == nil {
					to = readPage(t, rel)
					byPath[rel] = to
				}
				if !to.anchors()[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", pg.path, i+1, target, rel, anchor)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links found: is the link pattern broken?", checked)
	}
}

var (
	makeTarget  = regexp.MustCompile(`(?m)^([A-Za-z0-9][A-Za-z0-9_-]*)\s*:([^=]|$)`)
	makeCommand = regexp.MustCompile(`(?:^|[\s;&|(])make\s+([^;&|#)]*)`)
	makeVarName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
)

func makefile(t *testing.T) (text string, targets map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets = map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(data), -1) {
		targets[m[1]] = true
	}
	return string(data), targets
}

// makeUses lists the targets and variables a piece of code asks make for.
func makeUses(code string) (targets, vars []string) {
	for _, m := range makeCommand.FindAllStringSubmatch(code, -1) {
		for _, tok := range strings.Fields(m[1]) {
			switch {
			case strings.HasPrefix(tok, "-"):
			case strings.Contains(tok, "="):
				name, _, _ := strings.Cut(tok, "=")
				vars = append(vars, name)
			default:
				targets = append(targets, strings.Trim(tok, `"'`))
			}
		}
	}
	return targets, vars
}

// TestMakeTargets: every `make <target>` the pages name is a target of the
// Makefile, and every VAR=value given to make is a variable it mentions.
func TestMakeTargets(t *testing.T) {
	text, targets := makefile(t)
	if len(targets) < 20 {
		t.Fatalf("only %d targets found in the Makefile: is the pattern broken?", len(targets))
	}
	named := 0
	for _, pg := range pages(t) {
		for _, s := range pg.code() {
			ts, vs := makeUses(s.text)
			for _, target := range ts {
				named++
				if !targets[target] {
					t.Errorf("%s %s: make target %q is not in the Makefile", pg.path, s, target)
				}
			}
			for _, v := range vs {
				if !makeVarName.MatchString(v) || !strings.Contains(text, v) {
					t.Errorf("%s %s: make variable %q is not in the Makefile", pg.path, s, v)
				}
			}
		}
	}
	if named < 30 {
		t.Errorf("only %d make targets named in the pages: is the pattern broken?", named)
	}
}

func TestMakeUses(t *testing.T) {
	for code, want := range map[string]string{
		"make conformance PROFILE=kind":                         "conformance | PROFILE",
		"make generate manifests   # after an API change":       "generate manifests |",
		"make testbed-binaries && go test ./operator/...":       "testbed-binaries |",
		"eval \"$(bin/gpulab-testbed env)\"; make run-operator": "run-operator |",
		"go test ./docs/": " |",
	} {
		ts, vs := makeUses(code)
		if got := strings.Join(ts, " ") + " | " + strings.Join(vs, " "); strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("makeUses(%q) = %q, want %q", code, got, want)
		}
	}
}

var (
	reuseValues = regexp.MustCompile(`(^|\s)--reuse-values\b`)
	monitoring  = []string{
		"monitoring.serviceMonitor.enabled=true",
		"monitoring.podMonitor.enabled=true",
		"monitoring.volcanoServiceMonitor.enabled=true",
		"monitoring.prometheusRule.enabled=true",
	}
)

// TestInstallCommands: the install commands keep the forms that work.
//   - `kubectl apply -k` is server-side: the CRDs are too large for
//     client-side apply's annotation.
//   - `helm upgrade` uses --reset-then-reuse-values: --reuse-values drops
//     every value a newer chart adds.
//   - A code block that turns the chart's monitors on turns on all of them,
//     the Volcano ServiceMonitor included (without it the Gangs dashboard's
//     Volcano panels stay empty).
func TestInstallCommands(t *testing.T) {
	for _, pg := range pages(t) {
		for _, s := range pg.code() {
			if strings.Contains(s.text, "kubectl apply") && strings.Contains(s.text, " -k ") && !strings.Contains(s.text, "--server-side") {
				t.Errorf("%s %s: kubectl apply -k without --server-side", pg.path, s)
			}
			if strings.Contains(s.text, "helm upgrade") && !strings.Contains(s.text, "--reset-then-reuse-values") {
				t.Errorf("%s %s: helm upgrade without --reset-then-reuse-values", pg.path, s)
			}
			if s.fence && reuseValues.MatchString(s.text) {
				t.Errorf("%s %s: --reuse-values; use --reset-then-reuse-values", pg.path, s)
			}
		}
		for _, b := range pg.blocks() {
			if !strings.Contains(b.text, monitoring[0]) {
				continue
			}
			for _, want := range monitoring[1:] {
				if !strings.Contains(b.text, want) {
					t.Errorf("%s: the code block at line %d turns on %s but not %s", pg.path, b.line, monitoring[0], want)
				}
			}
		}
	}
}

// suiteCommands are the commands whose -h the CLI reference shows, in order.
var suiteCommands = [][]string{{"-h"}, {"compare", "-h"}, {"median", "-h"}, {"baseline", "-h"}, {"nightly", "-h"}, {"submit", "-h"}, {"status", "-h"}, {"retrieve", "-h"}, {"cleanup", "-h"}, {"version", "-h"}}

// commandName is the command an argument list runs: run when none is named.
func commandName(args []string) string {
	if strings.HasPrefix(args[0], "-") {
		return "run"
	}
	return args[0]
}

// suiteHelp is what gpulab-conformance prints for each command's -h.
func suiteHelp() map[string]string {
	out := map[string]string{}
	for _, args := range suiteCommands {
		var b bytes.Buffer
		cli.Main(args, &b, &b)
		out[commandName(args)] = b.String()
	}
	return out
}

const (
	cliPage       = "docs/conformance/cli.md"
	generatedFrom = "<!-- generated by `go test ./docs/ -run TestCLIReference -update`: do not edit below -->"
	generatedTo   = "<!-- end of generated reference -->"
)

// cliReference is the generated part of the CLI reference page.
func cliReference() string {
	help := suiteHelp()
	var b strings.Builder
	for _, args := range suiteCommands {
		cmdline := "gpulab-conformance " + strings.Join(args, " ")
		fmt.Fprintf(&b, "### `%s`\n\n```text\n$ %s\n%s\n```\n\n", cmdline, cmdline, strings.TrimRight(help[commandName(args)], "\n"))
	}
	return b.String()
}

// TestCLIReference: docs/conformance/cli.md shows exactly what
// gpulab-conformance -h (and each command's -h) prints.
func TestCLIReference(t *testing.T) {
	path := filepath.Join(root, cliPage)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	from, to := strings.Index(text, generatedFrom), strings.Index(text, generatedTo)
	if from < 0 || to < from {
		t.Fatalf("%s: the markers %q and %q are missing", cliPage, generatedFrom, generatedTo)
	}
	head, tail := text[:from+len(generatedFrom)], text[to:]
	want := head + "\n\n" + cliReference() + tail
	if want == text {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is stale: run go test ./docs/ -run TestCLIReference -update", cliPage)
}

var (
	helpFlag  = regexp.MustCompile(`(?m)^\s+--?([a-z][a-z0-9-]*)`)
	codeFlag  = regexp.MustCompile(`(?:^|[\s(\[])--([a-z][a-z0-9-]*)`)
	suiteCall = regexp.MustCompile(`gpulab-conformance(?:\s+(run|compare|median|baseline|nightly|submit|status|retrieve|cleanup|version))?((?:\s+[^|;&]*)?)`)
)

// suiteFlags are each command's flags, read from its -h.
func suiteFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for name, h := range suiteHelp() {
		out[name] = map[string]bool{"h": true}
		for _, m := range helpFlag.FindAllStringSubmatch(h, -1) {
			out[name][m[1]] = true
		}
		if len(out[name]) < 2 && name != "version" {
			t.Fatalf("no flags found in gpulab-conformance %s -h:\n%s", name, h)
		}
	}
	// submit takes every run flag besides its own, and nightly after --.
	for f := range out["run"] {
		out["submit"][f] = true
		out["nightly"][f] = true
	}
	return out
}

// TestSuiteFlags: every flag given to gpulab-conformance on a page is a
// flag of that command, and every --flag in code on the conformance and
// operations pages is a flag of some gpulab-conformance command (or one of
// the few other programs' flags those pages name).
func TestSuiteFlags(t *testing.T) {
	flags := suiteFlags(t)
	known := map[string]bool{}
	for _, fs := range flags {
		for f := range fs {
			known[f] = true
		}
	}
	// Flags of other programs that the conformance pages name.
	others := map[string]bool{"batch-scheduler": true, "server-side": true, "query-gpu": true, "format": true}
	for _, pg := range pages(t) {
		strict := strings.HasPrefix(pg.path, "docs/conformance/") || strings.HasPrefix(pg.path, "docs/operations/")
		for _, s := range pg.code() {
			for _, m := range suiteCall.FindAllStringSubmatch(s.text, -1) {
				cmd := m[1]
				if cmd == "" {
					cmd = "run"
				}
				for _, f := range codeFlag.FindAllStringSubmatch(m[2], -1) {
					if !flags[cmd][f[1]] {
						t.Errorf("%s %s: gpulab-conformance %s has no flag --%s", pg.path, s, cmd, f[1])
					}
				}
			}
			if !strict {
				continue
			}
			for _, f := range codeFlag.FindAllStringSubmatch(s.text, -1) {
				if !known[f[1]] && !others[f[1]] {
					t.Errorf("%s %s: --%s is no flag of gpulab-conformance", pg.path, s, f[1])
				}
			}
		}
	}
}

// TestEveryPageIsLinked: every page under docs/ is reachable from the
// index or another page, so none is lost.
func TestEveryPageIsLinked(t *testing.T) {
	all := pages(t)
	linked := map[string]bool{}
	for _, pg := range all {
		for _, l := range pg.prose() {
			for _, m := range linkTarget.FindAllStringSubmatch(l, -1) {
				file, _, _ := strings.Cut(m[1], "#")
				if file == "" || strings.Contains(file, "://") {
					continue
				}
				linked[filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(pg.path), file)))] = true
			}
		}
	}
	var lost []string
	for _, pg := range all {
		if strings.HasPrefix(pg.path, "docs/") && pg.path != "docs/README.md" && !linked[pg.path] {
			lost = append(lost, pg.path)
		}
	}
	sort.Strings(lost)
	if len(lost) > 0 {
		t.Errorf("pages no other page links to: %s", strings.Join(lost, ", "))
	}
}
