// Package stamp resolves what a build links into internal/version: the
// version (the VERSION file, or the v* tag HEAD is exactly on), the commit
// (with "-dirty" when the work tree has changes) and the build date
// (SOURCE_DATE_EPOCH when set, so a rebuild of a commit is byte for byte
// the same), and renders them as -ldflags. The Makefile and the release
// workflow both use it, so their binaries say the same thing.
//
// The tree state rides on the commit ("abc…-dirty") rather than on the
// version, so the version stays the release's semver and the build_info
// metric keeps its three labels; Kubernetes keeps it apart as
// gitTreeState, which would be a fourth.
package stamp

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// Package is the import path whose variables the ldflags set.
const Package = "github.com/gpulab/gpulab/internal/version"

// Source is what a build is stamped from. Read fills it from a checkout.
type Source struct {
	// VersionFile is the VERSION file's content: MAJOR.MINOR.PATCH with an
	// optional -PRERELEASE, with or without a leading v. Required.
	VersionFile string
	// HeadTags are the tags on HEAD; only v-prefixed semantic versions
	// count, and the highest of them wins over VersionFile.
	HeadTags []string
	// Commit is HEAD's full hash; empty outside a git checkout (the binary
	// then reports what Go recorded, or unknown).
	Commit string
	// Dirty says the work tree differs from HEAD (git status is not empty).
	Dirty bool
	// SourceDateEpoch is $SOURCE_DATE_EPOCH, seconds since 1970-01-01 UTC;
	// empty means Now.
	SourceDateEpoch string
	// Now is the build time when SourceDateEpoch is empty.
	Now time.Time
}

// Stamp is what goes into internal/version.
type Stamp struct {
	Version   string // v0.3.0
	Commit    string // full hash, "-dirty" appended for a changed tree; empty if unknown
	BuildDate string // RFC 3339, UTC
}

// semverCore is MAJOR.MINOR.PATCH[-PRERELEASE]: semver.IsValid also takes
// v1 and v1.2, which are not release versions.
var semverCore = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Resolve computes the stamp. Errors name the bad input.
func Resolve(src Source) (Stamp, error) {
	file := strings.TrimSpace(src.VersionFile)
	if file == "" {
		return Stamp{}, errors.New("the VERSION file is empty: want MAJOR.MINOR.PATCH, e.g. 0.3.0")
	}
	version := "v" + strings.TrimPrefix(file, "v")
	if !isRelease(version) {
		return Stamp{}, fmt.Errorf("VERSION %q is not MAJOR.MINOR.PATCH[-PRERELEASE] (e.g. 0.3.0 or 0.4.0-rc.1)", file)
	}
	var tagged string
	for _, tag := range src.HeadTags {
		if isRelease(tag) && (tagged == "" || semver.Compare(tag, tagged) > 0) {
			tagged = tag
		}
	}
	if tagged != "" {
		version = tagged
	}
	commit := src.Commit
	if commit != "" && src.Dirty {
		commit += "-dirty"
	}
	built := src.Now
	if src.SourceDateEpoch != "" {
		secs, err := strconv.ParseInt(src.SourceDateEpoch, 10, 64)
		if err != nil || secs < 0 {
			return Stamp{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want whole seconds since 1970-01-01 UTC", src.SourceDateEpoch)
		}
		built = time.Unix(secs, 0)
	}
	if built.IsZero() {
		return Stamp{}, errors.New("no build time: set SOURCE_DATE_EPOCH or Source.Now")
	}
	return Stamp{Version: version, Commit: commit, BuildDate: built.UTC().Format(time.RFC3339)}, nil
}

func isRelease(v string) bool { return semverCore.MatchString(v) && semver.IsValid(v) }

// LDFlags are the -X flags for go build -ldflags; an unknown commit is
// left out so the binary falls back to what Go recorded.
func (s Stamp) LDFlags() string {
	flags := []string{"-X " + Package + ".Version=" + s.Version}
	if s.Commit != "" {
		flags = append(flags, "-X "+Package+".Commit="+s.Commit)
	}
	flags = append(flags, "-X "+Package+".BuildDate="+s.BuildDate)
	return strings.Join(flags, " ")
}

// Env is the stamp as KEY=value lines for a shell or $GITHUB_ENV:
// VERSION, COMMIT, BUILD_DATE and LDFLAGS.
func (s Stamp) Env() string {
	return fmt.Sprintf("VERSION=%s\nCOMMIT=%s\nBUILD_DATE=%s\nLDFLAGS=%s\n", s.Version, s.Commit, s.BuildDate, s.LDFlags())
}
