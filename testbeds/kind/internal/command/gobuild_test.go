package command

import (
	"slices"
	"testing"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// TestGoBuildFlags: a static build turns cgo off and trims paths; any other
// uses exactly the tests' cgo flags and no -trimpath, or it would compile
// every package again instead of reusing what `make test` compiled.
func TestGoBuildFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		b        GoBuild
		env      []string
		wantArgs []string
	}{
		{"static", GoBuild{Pkg: "./p", Out: "o", Static: true, LDFlags: "-X a.b=c"},
			[]string{"CGO_ENABLED=0"}, []string{"build", "-trimpath", "-ldflags=-s -w -X a.b=c", "-o", "o", "./p"}},
		{"like the tests", GoBuild{Pkg: "./p", Out: "o"},
			[]string{"CGO_ENABLED=1", "CGO_CFLAGS=" + binaries.CgoCFlags}, []string{"build", "-ldflags=-s -w", "-o", "o", "./p"}},
		{"a test binary", GoBuild{Pkg: "./p", Out: "o", Test: true},
			[]string{"CGO_ENABLED=1", "CGO_CFLAGS=" + binaries.CgoCFlags}, []string{"test", "-c", "-ldflags=-s -w", "-o", "o", "./p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.b.Cmd()
			if c.Name != "go" || !slices.Equal(c.Env, tc.env) || !slices.Equal(c.Args, tc.wantArgs) {
				t.Errorf("got %s %q env %q, want go %q env %q", c.Name, c.Args, c.Env, tc.wantArgs, tc.env)
			}
		})
	}
}
