package stamp

import (
	"strings"
	"testing"
	"time"
)

const sha = "410151c9973ce4bc01dcaf3c39a89af51047476f"

func TestResolve(t *testing.T) {
	now := time.Date(2026, 12, 1, 14, 30, 15, 999, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name string
		src  Source
		want Stamp
	}{
		{"VERSION file, clean tree, the clock in UTC",
			Source{VersionFile: "0.3.0\n", Commit: sha, Now: now},
			Stamp{Version: "v0.3.0", Commit: sha, BuildDate: "2026-12-01T13:30:15Z"}},
		{"a leading v in VERSION is the same version",
			Source{VersionFile: "v0.3.0", Commit: sha, Now: now},
			Stamp{Version: "v0.3.0", Commit: sha, BuildDate: "2026-12-01T13:30:15Z"}},
		{"dirty tree marks the commit, not the version",
			Source{VersionFile: "0.3.0", Commit: sha, Dirty: true, Now: now},
			Stamp{Version: "v0.3.0", Commit: sha + "-dirty", BuildDate: "2026-12-01T13:30:15Z"}},
		{"SOURCE_DATE_EPOCH wins over the clock",
			Source{VersionFile: "0.3.0", Commit: sha, SourceDateEpoch: "1700000000", Now: now},
			Stamp{Version: "v0.3.0", Commit: sha, BuildDate: "2023-11-14T22:13:20Z"}},
		{"a v* tag on HEAD wins over VERSION",
			Source{VersionFile: "0.3.0", HeadTags: []string{"v0.3.1"}, Commit: sha, Now: now},
			Stamp{Version: "v0.3.1", Commit: sha, BuildDate: "2026-12-01T13:30:15Z"}},
		{"of several tags the highest release wins; others are ignored",
			Source{VersionFile: "0.3.0", HeadTags: []string{"v0.4.0-rc.1", "nightly", "v0.4.0", "v1", "0.9.0", "v0.3.9"}, Commit: sha, Now: now},
			Stamp{Version: "v0.4.0", Commit: sha, BuildDate: "2026-12-01T13:30:15Z"}},
		{"a prerelease VERSION",
			Source{VersionFile: "0.4.0-rc.1", Now: now},
			Stamp{Version: "v0.4.0-rc.1", BuildDate: "2026-12-01T13:30:15Z"}},
		{"no git: no commit, and a dirty flag alone means nothing",
			Source{VersionFile: "0.3.0", Dirty: true, SourceDateEpoch: "0", Now: now},
			Stamp{Version: "v0.3.0", BuildDate: "1970-01-01T00:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestResolveRejects(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name, want string
		src        Source
	}{
		{"empty VERSION", "VERSION file is empty", Source{VersionFile: " \n", Now: now}},
		{"two-part VERSION", `VERSION "0.3"`, Source{VersionFile: "0.3", Now: now}},
		{"build metadata", `VERSION "0.3.0+abc"`, Source{VersionFile: "0.3.0+abc", Now: now}},
		{"leading zero", `VERSION "0.03.0"`, Source{VersionFile: "0.03.0", Now: now}},
		{"not a number", `SOURCE_DATE_EPOCH="yesterday"`, Source{VersionFile: "0.3.0", SourceDateEpoch: "yesterday", Now: now}},
		{"negative epoch", `SOURCE_DATE_EPOCH="-1"`, Source{VersionFile: "0.3.0", SourceDateEpoch: "-1", Now: now}},
		{"no time at all", "no build time", Source{VersionFile: "0.3.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Resolve(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Resolve error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLDFlags(t *testing.T) {
	s := Stamp{Version: "v0.3.0", Commit: sha + "-dirty", BuildDate: "2026-12-01T13:30:15Z"}
	want := "-X github.com/gpulab/gpulab/internal/version.Version=v0.3.0" +
		" -X github.com/gpulab/gpulab/internal/version.Commit=" + sha + "-dirty" +
		" -X github.com/gpulab/gpulab/internal/version.BuildDate=2026-12-01T13:30:15Z"
	if got := s.LDFlags(); got != want {
		t.Errorf("LDFlags =\n%s\nwant\n%s", got, want)
	}
	s.Commit = ""
	if got := s.LDFlags(); strings.Contains(got, ".Commit=") {
		t.Errorf("LDFlags with no commit set one: %s", got)
	}
	env := Stamp{Version: "v0.3.0", Commit: sha, BuildDate: "2026-12-01T13:30:15Z"}.Env()
	for _, line := range []string{"VERSION=v0.3.0\n", "COMMIT=" + sha + "\n", "BUILD_DATE=2026-12-01T13:30:15Z\n", "LDFLAGS=-X "} {
		if !strings.Contains(env, line) {
			t.Errorf("Env lacks %q:\n%s", line, env)
		}
	}
}
