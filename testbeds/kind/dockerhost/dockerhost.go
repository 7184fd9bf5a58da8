// Package dockerhost makes sure a Docker daemon that can run kind's
// privileged node containers is there: it uses the one that answers, or
// starts Debian's dockerd (package docker.io) as root, with the
// capability shim of package runtimeshim as its default runtime where the
// host's capability bounding set is smaller than `--privileged` needs.
//
// The daemon it starts outlives the calling process (the testbed's clusters
// run in it); Stop ends it by the PID it recorded.
package dockerhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	gexec "github.com/vladimirvivien/gexe/exec"

	"github.com/gpulab/gpulab/testbeds/internal/procid"
	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
	"github.com/gpulab/gpulab/testbeds/kind/runtimeshim"
)

// ShimRuntime is the name the shim is registered under in dockerd.
const ShimRuntime = "gpulab-runc"

// Options configures Ensure.
type Options struct {
	// StateDir holds the daemon's PID file, log, the built shim and, when
	// it is started here, its data root. Required.
	StateDir string
	// RepoRoot is the gpulab repository, where the shim is built from.
	// Required when the shim is needed.
	RepoRoot string
	// ReadyTimeout bounds the wait for a started daemon to answer.
	// Defaults to 60s.
	ReadyTimeout time.Duration
	// Log receives progress. Defaults to io.Discard.
	Log io.Writer
	// StatusFile is where the capability bounding set is read from.
	// Defaults to /proc/self/status.
	StatusFile string
	// CapLastCapFile holds the kernel's highest capability number.
	// Defaults to /proc/sys/kernel/cap_last_cap.
	CapLastCapFile string
}

// Daemon describes the Docker daemon in use.
type Daemon struct {
	// PID is the dockerd this package started, 0 for one that was running.
	PID int
	// Shim is true when containers run through the capability shim.
	Shim bool
	// Log is the started daemon's log file ("" for one already running).
	Log string
	// MissingCaps are the capabilities the bounding set lacks.
	MissingCaps []string
}

// ErrNoDocker says neither a daemon nor dockerd is there to use.
var ErrNoDocker = errors.New("no Docker daemon answers and dockerd is not installed (Debian: apt-get install -y docker.io)")

func (o Options) withDefaults() (Options, error) {
	if o.StateDir == "" {
		return o, errors.New("dockerhost: Options.StateDir is required")
	}
	dir, err := realDir(o.StateDir)
	if err != nil {
		return o, err
	}
	o.StateDir = dir
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.StatusFile == "" {
		o.StatusFile = "/proc/self/status"
	}
	if o.CapLastCapFile == "" {
		o.CapLastCapFile = "/proc/sys/kernel/cap_last_cap"
	}
	return o, nil
}

// Usable says whether the docker client reaches a daemon that can run a
// privileged container; the error says what is missing.
func Usable(ctx context.Context) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("no docker client on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := command.Output(ctx, command.Cmd{Name: "docker", Args: []string{"info", "--format", "{{.ServerVersion}}"}})
	return err
}

// Ensure returns the daemon to use, starting dockerd when none answers.
func Ensure(ctx context.Context, opts Options) (*Daemon, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	bounding, err := runtimeshim.Bounding(opts.StatusFile)
	if err != nil {
		return nil, err
	}
	lastCap, err := runtimeshim.LastCap(opts.CapLastCapFile)
	if err != nil {
		return nil, err
	}
	missing := runtimeshim.Missing(bounding, lastCap)
	// A dockerd an earlier Ensure started is the one to use again.
	if _, err := UseStarted(opts.StateDir); err != nil {
		return nil, err
	}
	if Usable(ctx) == nil {
		d := &Daemon{MissingCaps: missing, PID: recordedPID(opts.StateDir)}
		if d.PID != 0 {
			d.Log = logPath(opts.StateDir)
		}
		d.Shim, err = runsShim(ctx)
		if err != nil {
			return nil, err
		}
		if len(missing) > 0 && !d.Shim {
			return nil, fmt.Errorf("the running Docker daemon cannot start privileged containers on this host (the capability bounding set lacks %s): restart it with the %s runtime (gpulab-testbed docker-down; gpulab-testbed docker-up)",
				strings.Join(missing, ", "), ShimRuntime)
		}
		return d, nil
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, ErrNoDocker
	}
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return nil, err
	}
	sock := socketPath(opts.StateDir)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(configPath(opts.StateDir), []byte("{}\n"), 0o644); err != nil {
		return nil, err
	}
	args := daemonArgs(opts.StateDir, sock)
	d := &Daemon{MissingCaps: missing, Log: logPath(opts.StateDir)}
	if len(missing) > 0 {
		shim, err := buildShim(ctx, opts)
		if err != nil {
			return nil, err
		}
		args = append(args, "--add-runtime", ShimRuntime+"="+shim, "--default-runtime", ShimRuntime)
		d.Shim = true
		fmt.Fprintf(opts.Log, "the capability bounding set lacks %s: containers run through %s\n", strings.Join(missing, ", "), shim)
	}
	logFile, err := os.OpenFile(d.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// Not bound to ctx: the daemon must outlive this process.
	proc := gexec.NewProc(dockerd)
	cmd := proc.Command()
	cmd.Args = append([]string{dockerd}, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := proc.Start().Err(); err != nil {
		return nil, fmt.Errorf("starting dockerd: %w", err)
	}
	d.PID = proc.ID()
	go func() { _ = cmd.Wait() }() // reap it if it dies while this process runs
	// Recorded at once, so Stop never signals a later owner of the PID.
	if err := recordIdentity(opts.StateDir, d.PID); err != nil {
		return nil, err
	}
	// This process and what it runs (the docker CLI, kind) talk to it.
	if err := os.Setenv("DOCKER_HOST", "unix://"+sock); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "started dockerd (PID %d, log %s)\n", d.PID, d.Log)
	deadline := time.Now().Add(opts.ReadyTimeout)
	for {
		if err = Usable(ctx); err == nil {
			return d, nil
		}
		if !alive(d.PID) {
			return nil, fmt.Errorf("dockerd (PID %d) exited: see %s", d.PID, d.Log)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dockerd (PID %d) did not answer within %s (log %s): %w", d.PID, opts.ReadyTimeout, d.Log, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Stop ends the dockerd that Ensure started (by the PID it recorded, while
// that is still the same process) and waits for it to exit; without one it
// does nothing.
func Stop(ctx context.Context, stateDir string, timeout time.Duration) (int, error) {
	stateDir, err := realDir(stateDir)
	if err != nil {
		return 0, err
	}
	id, ok := recorded(stateDir)
	if !ok {
		return 0, nil
	}
	if err := procid.Signal(id, syscall.SIGTERM); err != nil {
		if errors.Is(err, procid.ErrNotRunning) || errors.Is(err, procid.ErrNotOurs) {
			return 0, nil
		}
		return id.PID, fmt.Errorf("stopping dockerd (PID %d): %w", id.PID, err)
	}
	deadline := time.Now().Add(timeout)
	for id.Check() == nil && alive(id.PID) {
		if time.Now().After(deadline) {
			return id.PID, fmt.Errorf("dockerd (PID %d) still runs %s after SIGTERM", id.PID, timeout)
		}
		select {
		case <-ctx.Done():
			return id.PID, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return id.PID, nil
}

// runsShim says whether the running daemon's default runtime is the shim.
func runsShim(ctx context.Context) (bool, error) {
	out, err := command.Output(ctx, command.Cmd{Name: "docker", Args: []string{"info", "--format", "{{.DefaultRuntime}}"}})
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(out) == ShimRuntime, nil
}

// buildShim compiles the shim into the state folder, with the host's runc
// stamped in.
func buildShim(ctx context.Context, opts Options) (string, error) {
	if opts.RepoRoot == "" {
		return "", errors.New("dockerhost: Options.RepoRoot is required to build the runtime shim")
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return "", fmt.Errorf("the runtime shim hands over to runc, which is not on PATH (Debian: apt-get install -y runc): %w", err)
	}
	out := filepath.Join(opts.StateDir, ShimRuntime)
	err = command.Run(ctx, command.GoBuild{Pkg: "./testbeds/kind/runtimeshim/cmd/gpulab-runc", Out: out, Dir: opts.RepoRoot,
		Static: true, LDFlags: "-X main.runcPath=" + runc}.Cmd())
	if err != nil {
		return "", fmt.Errorf("building the runtime shim: %w", err)
	}
	return out, nil
}

func pidPath(dir string) string { return filepath.Join(dir, "dockerd.pid") }
func logPath(dir string) string { return filepath.Join(dir, "dockerd.log") }

// recordedPID is the PID of the dockerd Ensure started if it still runs,
// else 0.
func recordedPID(dir string) int {
	id, _ := recorded(dir)
	return id.PID
}

// recorded is the identity of the dockerd Ensure started, if the PID in its
// pid file is still that process: the identity recorded at start decides;
// without one, the PID must run dockerd and have started around the pid
// file's write. A PID the kernel gave to another process is never
// signalled: its stale file is removed.
func recorded(dir string) (procid.Identity, bool) {
	path := pidPath(dir)
	expect := procid.Expect{Program: "dockerd"}
	if bin, err := exec.LookPath("dockerd"); err == nil {
		expect.Exe = bin
	}
	id, err := procid.Owned(path, expect)
	if errors.Is(err, procid.ErrNotOurs) {
		fmt.Fprintf(os.Stderr, "dockerhost: %v; leaving it alone and removing %s\n", err, path)
		_ = os.Remove(path)
		_ = os.Remove(procid.IDFile(path))
	}
	if err != nil || !alive(id.PID) {
		return procid.Identity{}, false
	}
	return id, true
}

// recordIdentity records the identity of the dockerd just started beside
// the pid file it writes.
func recordIdentity(dir string, pid int) error {
	id, err := procid.Of(pid)
	if err != nil {
		return fmt.Errorf("recording the identity of dockerd (PID %d): %w", pid, err)
	}
	return procid.Save(procid.IDFile(pidPath(dir)), id)
}

// UseStarted points this process's Docker clients (DOCKER_HOST, which the
// docker CLI and kind's provider read) at the dockerd that Ensure started,
// when it runs and DOCKER_HOST is not set already. It says whether it did.
func UseStarted(stateDir string) (bool, error) {
	stateDir, err := realDir(stateDir)
	if err != nil {
		return false, err
	}
	if os.Getenv("DOCKER_HOST") != "" || recordedPID(stateDir) == 0 {
		return false, nil
	}
	return true, os.Setenv("DOCKER_HOST", "unix://"+socketPath(stateDir))
}

// realDir is dir as an absolute path without symbolic links, resolving the
// part that exists: runc refuses a container root file system whose path
// holds a link ("invalid rootfs: not an absolute path, or a symlink"), and
// the cache folder the state lives in often is one. Every entry point
// resolves it alike, so the socket and pid file derived from it agree.
func realDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("dockerhost: state folder %s: %w", dir, err)
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || p == filepath.Dir(p) {
			return "", fmt.Errorf("dockerhost: state folder %s: %w", dir, err)
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// daemonArgs keep everything of the dockerd gpulab starts under its state
// folder: data, exec state, PID file, socket and config file. The host's
// /var/lib/docker, /run/docker.sock and /etc/docker/daemon.json stay
// untouched.
func daemonArgs(stateDir, sock string) []string {
	return []string{
		"--data-root", filepath.Join(stateDir, "data"),
		"--exec-root", execRoot(stateDir),
		"--pidfile", pidPath(stateDir),
		"--host", "unix://" + sock,
		"--config-file", configPath(stateDir),
		"--storage-driver", "overlay2",
	}
}

// maxSocketPath is a unix socket path's limit (sun_path, less its NUL).
const maxSocketPath = 107

// socketPath is the started dockerd's socket in the state folder, or, when
// that path is too long for a unix socket, one in /run named after it.
func socketPath(stateDir string) string {
	if p := filepath.Join(stateDir, "docker.sock"); len(p) <= maxSocketPath {
		return p
	}
	return filepath.Join(shortRunDir(stateDir), "docker.sock")
}

// execRoot holds containerd's sockets, which have the same length limit.
func execRoot(stateDir string) string {
	if p := filepath.Join(stateDir, "exec"); len(p) <= 60 {
		return p
	}
	return filepath.Join(shortRunDir(stateDir), "exec")
}

func shortRunDir(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return filepath.Join("/run", "gpulab-"+hex.EncodeToString(sum[:6]))
}

func configPath(dir string) string { return filepath.Join(dir, "daemon.json") }

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie (exited, not reaped) counts as gone.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}
