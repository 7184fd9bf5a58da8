// Package version says which build of gpulab is running, for --version
// flags and for results that must name what produced them.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit are set at link time:
//
//	-ldflags "-X github.com/gpulab/gpulab/internal/version.Version=v0.3.0 -X github.com/gpulab/gpulab/internal/version.Commit=abc1234"
//
// A plain `go build` leaves them empty and Get falls back to what the Go
// toolchain stamped into the binary.
var (
	Version string
	Commit  string
)

// Unknown is what Get reports for a commit nobody recorded.
const Unknown = "unknown"

// Devel is what Get reports for a version nobody recorded.
const Devel = "devel"

// Info is a build's version, commit and Go release.
type Info struct {
	Version   string
	Commit    string
	GoVersion string
}

// Get returns the build's version and commit: the linked-in Version and
// Commit where set, else the module version and VCS revision Go recorded
// (with "-dirty" for uncommitted changes), else Devel and Unknown.
func Get() Info {
	build, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, build)
}

// resolve is Get with its inputs passed in, so tests need no linker flags.
func resolve(version, commit string, build *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
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

// String is one line: "v0.3.0 (commit abc1234, go1.26.0)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s)", i.Version, i.Commit, i.GoVersion)
}
