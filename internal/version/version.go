// Package version says which build of gpulab is running, for --version
// flags and for results that must name what produced them.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version, Commit and BuildDate are set at link time from what
// internal/version/stamp resolves (the Makefile and the release workflow
// both ask `go run ./internal/version/cmd/ldflags`):
//
//	-X github.com/gpulab/gpulab/internal/version.Version=v0.3.0
//	-X github.com/gpulab/gpulab/internal/version.Commit=<full sha>[-dirty]
//	-X github.com/gpulab/gpulab/internal/version.BuildDate=2026-12-01T13:49:34Z
//
// A plain `go build` leaves them empty and Get falls back to what the Go
// toolchain stamped into the binary.
var (
	Version   string
	Commit    string
	BuildDate string
)

// Unknown is what Get reports for a commit or build date nobody recorded.
const Unknown = "unknown"

// Devel is what Get reports for a version nobody recorded.
const Devel = "devel"

// Info is a build's version, commit, build date and Go release.
type Info struct {
	// Version is a semantic version with a leading v (v0.3.0), as the
	// release tags and Go modules spell it.
	Version string
	// Commit is the full commit hash, with "-dirty" when the work tree
	// had uncommitted changes.
	Commit string
	// BuildDate is when it was built (UTC, RFC 3339); SOURCE_DATE_EPOCH
	// makes it reproducible.
	BuildDate string
	GoVersion string
}

// Get returns the build's version and commit: the linked-in values where
// set, else the module version and VCS revision Go recorded (with "-dirty"
// for uncommitted changes), else Devel and Unknown.
func Get() Info {
	build, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, BuildDate, build)
}

// resolve is Get with its inputs passed in, so tests need no linker flags.
func resolve(version, commit, buildDate string, build *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, BuildDate: buildDate, GoVersion: runtime.Version()}
	if build != nil {
		if build.GoVersion != "" {
			info.GoVersion = build.GoVersion
		}
		// go build stamps "(devel)" for a main module built from a work tree.
		if info.Version == "" && build.Main.Version != "" && build.Main.Version != "(devel)" {
			info.Version = build.Main.Version
		}
		if info.Commit == "" {
			info.Commit = vcsCommit(build.Settings)
		}
	}
	if info.Version == "" {
		info.Version = Devel
	}
	if info.Commit == "" {
		info.Commit = Unknown
	}
	// Go records the commit's time, not the build's: no fallback.
	if info.BuildDate == "" {
		info.BuildDate = Unknown
	}
	return info
}

func vcsCommit(settings []debug.BuildSetting) string {
	var revision string
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision != "" && modified {
		revision += "-dirty"
	}
	return revision
}

// String is one line: "v0.3.0 (commit abc1234, built 2026-12-01T13:49:34Z, go1.26.0)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion)
}
