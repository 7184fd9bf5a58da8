package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/internal/version"
)

func TestVersionCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := versionCommand(nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if want := "gpulab-conformance " + version.Get().String() + "\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	if code := versionCommand([]string{"--bogus"}, &stdout, &stderr); code != 2 {
		t.Errorf("a bad flag exits %d, want 2", code)
	}
	stdout.Reset()
	if code := versionCommand([]string{"-h"}, &stdout, &stderr); code != 0 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "usage:") {
		t.Errorf("-h exits %d with stdout %q, stderr %q; want 0, usage on stderr", code, stdout.String(), stderr.String())
	}
}
