package stamp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gitRepo is a real repository with VERSION committed once.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "VERSION"), "0.3.0\n")
	run(t, dir, "init", "-q")
	run(t, dir, "add", "VERSION")
	run(t, dir, "-c", "user.name=gpulab", "-c", "user.email=gpulab@example.com", "commit", "-q", "-m", "VERSION")
	return dir
}

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	// The user's git configuration must not change what the test sees.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadCheckout(t *testing.T) {
	dir := gitRepo(t)
	head := run(t, dir, "rev-parse", "HEAD")
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	read := func(env map[string]string) Stamp {
		t.Helper()
		src, err := Read(context.Background(), ReadOptions{Dir: dir, Getenv: func(k string) string { return env[k] }, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Resolve(src)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	if got, want := read(nil), (Stamp{Version: "v0.3.0", Commit: head, BuildDate: "2026-12-01T13:00:00Z"}); got != want {
		t.Errorf("clean checkout: %+v, want %+v", got, want)
	}
	run(t, dir, "tag", "v0.3.0")
	run(t, dir, "tag", "v0.3.1-rc.1")
	if got := read(nil).Version; got != "v0.3.1-rc.1" {
		t.Errorf("tagged v0.3.0 and v0.3.1-rc.1: version %s, want the higher, v0.3.1-rc.1", got)
	}
	write(t, filepath.Join(dir, "VERSION"), "0.4.0\n")
	got := read(map[string]string{"SOURCE_DATE_EPOCH": "1700000000"})
	if want := (Stamp{Version: "v0.3.1-rc.1", Commit: head + "-dirty", BuildDate: "2023-11-14T22:13:20Z"}); got != want {
		t.Errorf("tagged, changed tree, SOURCE_DATE_EPOCH: %+v, want %+v", got, want)
	}
}

func TestReadOutsideGit(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "VERSION"), "0.3.0\n")
	// A source tarball: no .git here; GIT_CEILING_DIRECTORIES keeps git
	// from finding a repository above the temporary directory.
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(dir))
	src, err := Read(context.Background(), ReadOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if src.Commit != "" || src.Dirty || len(src.HeadTags) > 0 || src.VersionFile != "0.3.0\n" {
		t.Errorf("outside git: %+v", src)
	}
}

func TestReadWithoutVersionFile(t *testing.T) {
	if _, err := Read(context.Background(), ReadOptions{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "VERSION") {
		t.Errorf("Read error = %v, want one naming VERSION", err)
	}
}
