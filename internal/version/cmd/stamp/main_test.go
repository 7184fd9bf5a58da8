package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkedBinaryReportsTheStamp links a program with what the command
// prints and runs it: a wrong -X path would be ignored by the linker
// without a word, so only the built binary can prove the flags work.
func TestLinkedBinaryReportsTheStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	var ldflags, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-dir", root}, &ldflags, &stderr); code != 0 {
		t.Fatalf("stamp exited %d: %s", code, stderr.String())
	}
	var version bytes.Buffer
	if code := run(context.Background(), []string{"-dir", root, "-format", "version"}, &version, &stderr); code != 0 {
		t.Fatalf("stamp -format version exited %d: %s", code, stderr.String())
	}
	bin := filepath.Join(t.TempDir(), "printversion")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", strings.TrimSpace(ldflags.String()), "./testdata/printversion")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(string(out))
	want := strings.TrimSpace(version.String()) + " (commit "
	if !strings.HasPrefix(got, want) || !strings.Contains(got, ", built 2023-11-14T22:13:20Z, go") {
		t.Errorf("the stamped binary says %q, want %q... built 2023-11-14T22:13:20Z", got, want)
	}
	if strings.Contains(got, "unknown") || strings.Contains(got, "devel") {
		t.Errorf("the stamped binary fell back to defaults: %q", got)
	}
}

func TestBadUsage(t *testing.T) {
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-format", "yaml", "-dir", root}, {"extra"}, {"-dir", t.TempDir()}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code == 0 || stderr.Len() == 0 || stdout.Len() != 0 {
			t.Errorf("stamp %v: exit %d, stdout %q, stderr %q; want a non-zero exit with the reason on stderr only", args, code, stdout.String(), stderr.String())
		}
	}
}
