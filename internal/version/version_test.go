package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc1234"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
	}}
	for _, tc := range []struct {
		name                       string
		version, commit, buildDate string
		build                      *debug.BuildInfo
		want                       Info
	}{
		{"linker flags win", "v0.3.0", "fff0000", "2026-12-01T13:30:15Z", stamped,
			Info{Version: "v0.3.0", Commit: "fff0000", BuildDate: "2026-12-01T13:30:15Z", GoVersion: "go1.99.1"}},
		{"build info fills the gaps, dirty marked, the commit time is not a build date", "", "", "", stamped,
			Info{Version: "v1.2.3", Commit: "abc1234-dirty", BuildDate: Unknown, GoVersion: "go1.99.1"}},
		{"clean tree is not dirty", "", "", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc1234"}, {Key: "vcs.modified", Value: "false"},
		}}, Info{Version: Devel, Commit: "abc1234", BuildDate: Unknown, GoVersion: "go1.99.1"}},
		{"nothing recorded", "", "", "", nil, Info{Version: Devel, Commit: Unknown, BuildDate: Unknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.buildDate, tc.build)
			if tc.want.GoVersion == "" {
				tc.want.GoVersion = got.GoVersion
				if !strings.HasPrefix(got.GoVersion, "go") {
					t.Errorf("GoVersion %q, want the runtime's", got.GoVersion)
				}
			}
			if got != tc.want {
				t.Errorf("resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	got := Info{Version: "v0.3.0", Commit: "abc1234", BuildDate: "2026-12-01T13:30:15Z", GoVersion: "go1.26.0"}.String()
	if want := "v0.3.0 (commit abc1234, built 2026-12-01T13:30:15Z, go1.26.0)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestGetNeverEmpty(t *testing.T) {
	info := Get()
	if info.Version == "" || info.Commit == "" || info.BuildDate == "" || info.GoVersion == "" {
		t.Errorf("Get = %+v, want every field set", info)
	}
}
