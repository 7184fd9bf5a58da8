package dockerhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The dockerd gpulab starts keeps everything under its state folder and
// never names the host's data root, socket or config file.
func TestDaemonArgsStayInTheStateDir(t *testing.T) {
	state := "/var/cache/gpulab/kind/docker"
	args := daemonArgs(state, socketPath(state))
	value := func(flag string) string {
		i := slices.Index(args, flag)
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("%s missing from %v", flag, args)
		}
		return args[i+1]
	}
	for _, flag := range []string{"--data-root", "--exec-root", "--pidfile", "--config-file"} {
		if v := value(flag); !strings.HasPrefix(v, state+"/") {
			t.Errorf("%s %s: not under the state folder %s", flag, v, state)
		}
	}
	if v := value("--host"); v != "unix://"+state+"/docker.sock" {
		t.Errorf("--host %s, want the state folder's socket", v)
	}
	joined := strings.Join(args, " ")
	for _, host := range []string{"/var/lib/docker", "/run/docker.sock", "/var/run/docker.sock", "/etc/docker"} {
		if strings.Contains(joined, host) {
			t.Errorf("dockerd args name the host's %s: %s", host, joined)
		}
	}
}

// A state folder too deep for a unix socket gets a short one under /run,
// the same every time.
func TestSocketPathTooLong(t *testing.T) {
	state := "/" + strings.Repeat("d", 120)
	sock := socketPath(state)
	if len(sock) > maxSocketPath || !strings.HasPrefix(sock, "/run/gpulab-") {
		t.Fatalf("socket %s (%d bytes) for a %d-byte state folder", sock, len(sock), len(state))
	}
	again := socketPath(state)
	if again != sock {
		t.Fatalf("socket path not stable: %s then %s", sock, again)
	}
}

// UseStarted points DOCKER_HOST at the dockerd it recorded only when that
// PID is still the dockerd; a pid file whose number went to another
// process is removed and the process left alone.
func TestUseStartedIgnoresAReusedPID(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	state := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(pidPath(state), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	used, err := UseStarted(state)
	if err != nil || used {
		t.Fatalf("UseStarted = %v, %v for a pid file naming sleep, want false", used, err)
	}
	if got := os.Getenv("DOCKER_HOST"); got != "" {
		t.Fatalf("DOCKER_HOST set to %q", got)
	}
	if _, err := os.Stat(pidPath(state)); !os.IsNotExist(err) {
		t.Fatalf("stale pid file kept: %v", err)
	}
	pid, err := Stop(t.Context(), state, time.Second)
	if err != nil || pid != 0 {
		t.Fatalf("Stop = %d, %v with no dockerd of ours, want 0, nil", pid, err)
	}
	if !alive(cmd.Process.Pid) {
		t.Fatal("the process a stale pid file named was signalled")
	}
}

// A DOCKER_HOST the user set is theirs: UseStarted never replaces it.
func TestUseStartedKeepsTheUsersDockerHost(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///somewhere/else.sock")
	if used, err := UseStarted(filepath.Join(t.TempDir(), "none")); err != nil || used {
		t.Fatalf("UseStarted = %v, %v", used, err)
	}
	if got := os.Getenv("DOCKER_HOST"); got != "unix:///somewhere/else.sock" {
		t.Fatalf("DOCKER_HOST = %q", got)
	}
}

// runc refuses a root file system whose path holds a symbolic link, and the
// per-user cache is often one: the data and exec roots dockerd gets are the
// state folder's real path, also for the part not created yet.
func TestStateDirThroughASymlinkIsResolved(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "cache")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	realResolved, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := Options{StateDir: filepath.Join(link, "kind", "docker")}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(realResolved, "kind", "docker")
	if opts.StateDir != want {
		t.Fatalf("state folder %s, want %s", opts.StateDir, want)
	}
	args := daemonArgs(opts.StateDir, socketPath(opts.StateDir))
	for _, flag := range []string{"--data-root", "--exec-root"} {
		v := args[slices.Index(args, flag)+1]
		if strings.HasPrefix(v, link) {
			t.Errorf("%s %s goes through the link %s", flag, v, link)
		}
	}
}
