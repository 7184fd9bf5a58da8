package command

import (
	"io"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// GoBuild is a build of this repository's code for the kind testbed.
type GoBuild struct {
	// Pkg is the package, relative to Dir; Out the binary written.
	Pkg, Out string
	// Dir is the repository root. Defaults to the current directory.
	Dir string
	// Static builds with cgo off and -trimpath, for scratch images and the
	// host. Otherwise the build uses the flags `make test` compiles with
	// (cgo on, binaries.CgoCFlags, no -trimpath), so it reuses the packages
	// the tests compiled and mostly only links.
	Static bool
	// Test builds the package's test binary (go test -c), as the suite is.
	Test bool
	// LDFlags are added after -s -w.
	LDFlags string
	// Log also receives the output; nil for none.
	Log io.Writer
}

// Cmd is the go command of b.
func (b GoBuild) Cmd() Cmd {
	env, args := []string{"CGO_ENABLED=1", "CGO_CFLAGS=" + binaries.CgoCFlags}, []string{"build"}
	if b.Test {
		args = []string{"test", "-c"}
	}
	if b.Static {
		env = []string{"CGO_ENABLED=0"}
		args = append(args, "-trimpath")
	}
	ldflags := "-s -w"
	if b.LDFlags != "" {
		ldflags += " " + b.LDFlags
	}
	args = append(args, "-ldflags="+ldflags, "-o", b.Out, b.Pkg)
	return Cmd{Name: "go", Dir: b.Dir, Env: env, Args: args, Log: b.Log}
}
