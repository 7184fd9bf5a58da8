package runtimeshim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestBoundingParsesCapBnd(t *testing.T) {
	status := filepath.Join(t.TempDir(), "status")
	// Every capability up to CAP_CHECKPOINT_RESTORE (40) but CAP_SYS_RESOURCE (24).
	if err := os.WriteFile(status, []byte("Name:\tx\nCapInh:\t0000000000000000\nCapBnd:\t000001fffeffffff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := Bounding(status)
	if err != nil {
		t.Fatal(err)
	}
	if got := Missing(set, 40); !slices.Equal(got, []string{"CAP_SYS_RESOURCE"}) {
		t.Errorf("Missing = %v, want [CAP_SYS_RESOURCE]", got)
	}
	if !set["CAP_SYS_ADMIN"] || !set["CAP_CHECKPOINT_RESTORE"] {
		t.Errorf("bounding set lacks CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE: %v", set)
	}
	if err := os.WriteFile(status, []byte("Name:\tx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Bounding(status); err == nil {
		t.Error("a status file without CapBnd was accepted")
	}
}

func TestSpecFileFindsTheProcess(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		path, field string
		ok          bool
	}{
		{args: []string{"--root", "/run/r", "--log", "/l.json", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, path: "/b/config.json", field: "process", ok: true},
		{args: []string{"create", "-b=/b2", "id"}, path: "/b2/config.json", field: "process", ok: true},
		{args: []string{"run", "id"}, path: "/wd/config.json", field: "process", ok: true},
		{args: []string{"--root", "/r", "exec", "--process", "/tmp/p.json", "--detach", "id"}, path: "/tmp/p.json", ok: true},
		{args: []string{"exec", "-p", "/tmp/p.json", "id"}, path: "/tmp/p.json", ok: true},
		{args: []string{"exec", "id", "sh"}},
		{args: []string{"--root", "/create", "start", "id"}},
		{args: []string{"delete", "--force", "id"}},
	} {
		path, field, ok := SpecFile(tc.args, "/wd")
		if ok != tc.ok || path != tc.path || field != tc.field {
			t.Errorf("SpecFile(%q) = %q, %q, %v; want %q, %q, %v", tc.args, path, field, ok, tc.path, tc.field, tc.ok)
		}
	}
}

func TestFilterFileDropsOnlyMissingCapabilities(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config.json")
	spec := `{"ociVersion":"1.0.2","process":{"args":["sh"],"capabilities":{
		"bounding":["CAP_SYS_ADMIN","CAP_SYS_RESOURCE","CAP_KILL"],
		"effective":["CAP_SYS_RESOURCE","CAP_KILL"],
		"permitted":["CAP_SYS_ADMIN","CAP_SYS_RESOURCE"]}},"root":{"path":"rootfs"}}`
	if err := os.WriteFile(config, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"CAP_SYS_ADMIN": true, "CAP_KILL": true}
	if err := FilterFile(config, "process", allowed); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Process struct {
			Args         []string            `json:"args"`
			Capabilities map[string][]string `json:"capabilities"`
		} `json:"process"`
		Root map[string]string `json:"root"`
	}
	data, _ := os.ReadFile(config)
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"bounding": {"CAP_SYS_ADMIN", "CAP_KILL"}, "effective": {"CAP_KILL"}, "permitted": {"CAP_SYS_ADMIN"},
	}
	for set, caps := range want {
		if !slices.Equal(got.Process.Capabilities[set], caps) {
			t.Errorf("%s = %v, want %v", set, got.Process.Capabilities[set], caps)
		}
	}
	if got.Root["path"] != "rootfs" || !slices.Equal(got.Process.Args, []string{"sh"}) {
		t.Errorf("other fields changed: %s", data)
	}
	if st, _ := os.Stat(config); st.Mode().Perm() != 0o600 {
		t.Errorf("mode changed to %v", st.Mode().Perm())
	}

	// An exec --process file holds the process at the top level.
	process := filepath.Join(dir, "process.json")
	if err := os.WriteFile(process, []byte(`{"args":["ls"],"capabilities":{"bounding":["CAP_SYS_RESOURCE"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := FilterFile(process, "", allowed); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(process)
	if string(data) != `{"args":["ls"],"capabilities":{"bounding":[]}}` {
		t.Errorf("process file = %s", data)
	}
}

// A kernel older than the capability list (cap_last_cap 37: no
// CAP_PERFMON, CAP_BPF or CAP_CHECKPOINT_RESTORE) lacks them in its
// bounding set because they do not exist, not because they were dropped.
func TestMissingIgnoresCapabilitiesTheKernelDoesNotHave(t *testing.T) {
	dir := t.TempDir()
	status, last := filepath.Join(dir, "status"), filepath.Join(dir, "cap_last_cap")
	// Capabilities 0..37, all present.
	if err := os.WriteFile(status, []byte("CapBnd:\t0000003fffffffff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(last, []byte("37\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := Bounding(status)
	if err != nil {
		t.Fatal(err)
	}
	lastCap, err := LastCap(last)
	if err != nil || lastCap != 37 {
		t.Fatalf("LastCap = %d, %v", lastCap, err)
	}
	if got := Missing(set, lastCap); len(got) != 0 {
		t.Errorf("Missing = %v on a kernel whose last capability is 37, want none", got)
	}
	if got := Missing(set, 40); !slices.Equal(got, []string{"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE"}) {
		t.Errorf("Missing = %v on a kernel with 40, want the three newest", got)
	}
	if err := os.WriteFile(last, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LastCap(last); err == nil {
		t.Error("LastCap accepted a non-number")
	}
}
