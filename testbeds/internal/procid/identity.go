package procid

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNotRunning says no process has the PID (or the pid file names none).
var ErrNotRunning = errors.New("not running")

// slackBefore is how long before its pid file was written a process may have
// started: the writer forks first (dockerd writes its own file after some
// start-up), and the boot time is in whole seconds.
const slackBefore = 30 * time.Second

// Identity tells a process apart from any later one that gets its PID.
type Identity struct {
	PID int `json:"pid"`
	// StartTicks is field 22 of /proc/<pid>/stat, clock ticks after boot;
	// unlike a wall-clock time it does not move when the clock is set.
	StartTicks uint64 `json:"startTicks"`
	// BootID is /proc/sys/kernel/random/boot_id: ticks restart every boot.
	BootID string `json:"bootID"`
	// Exe is the binary /proc/<pid>/exe links to; "" when it cannot be read
	// (a zombie has none).
	Exe string `json:"exe"`
}

// Of reads the identity of the live process pid; the error wraps
// ErrNotRunning when there is none.
func Of(pid int) (Identity, error) {
	ticks, err := startTicks(pid)
	if err != nil {
		return Identity{}, err
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return Identity{}, err
	}
	id := Identity{PID: pid, StartTicks: ticks, BootID: strings.TrimSpace(string(boot))}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
		// A binary replaced since it started (the agent is rebuilt in place).
		id.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	return id, nil
}

// Same says whether now (read later for the same PID) is the process id
// was taken of; the error wraps ErrNotOurs when it is not.
func (id Identity) Same(now Identity) error {
	switch {
	case id.PID != now.PID:
		return fmt.Errorf("pid %d is not pid %d: %w", now.PID, id.PID, ErrNotOurs)
	case id.BootID != now.BootID || id.StartTicks != now.StartTicks:
		return fmt.Errorf("pid %d started at tick %d (boot %s), the recorded process at %d (boot %s): %w",
			id.PID, now.StartTicks, now.BootID, id.StartTicks, id.BootID, ErrNotOurs)
	// The start time alone tells processes apart; the binary is checked
	// too where both are known (not for a zombie).
	case id.Exe != "" && now.Exe != "" && id.Exe != now.Exe:
		return fmt.Errorf("pid %d runs %s, the recorded process ran %s: %w", id.PID, now.Exe, id.Exe, ErrNotOurs)
	}
	return nil
}

// Check says whether the process is still running; the error wraps
// ErrNotRunning or ErrNotOurs when it is not.
func (id Identity) Check() error {
	now, err := Of(id.PID)
	if err != nil {
		return err
	}
	return id.Same(now)
}

// Signal sends sig to the process only if its PID still belongs to it. A
// pidfd is taken before the check, so the signal cannot reach a process
// that got the PID after it.
func Signal(id Identity, sig syscall.Signal) error {
	fd, err := pidfdOpen(id.PID)
	switch {
	case errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("pid %d: %w", id.PID, ErrNotRunning)
	case errors.Is(err, syscall.ENOSYS):
		fd = -1 // Linux before 5.3: check, then kill
	case err != nil:
		return fmt.Errorf("pidfd_open %d: %w", id.PID, err)
	}
	if fd >= 0 {
		defer syscall.Close(fd)
	}
	if err := id.Check(); err != nil {
		return err
	}
	if fd >= 0 {
		err = pidfdSendSignal(fd, sig)
	} else {
		err = syscall.Kill(id.PID, sig)
	}
	if errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pid %d: %w", id.PID, ErrNotRunning)
	}
	if err != nil {
		return fmt.Errorf("signalling pid %d: %w", id.PID, err)
	}
	return nil
}

// The pidfd system calls have the same numbers on every architecture.
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

func pidfdOpen(pid int) (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func pidfdSendSignal(fd int, sig syscall.Signal) error {
	if _, _, errno := syscall.Syscall6(sysPidfdSendSignal, uintptr(fd), uintptr(sig), 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// IDFile is where the identity of the process a pid file names is recorded.
func IDFile(pidFile string) string { return pidFile + ".id" }

// Save records id at path (written whole, then renamed into place).
func Save(path string, id Identity) error {
	data, err := json.Marshal(id)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Load reads an identity Save recorded.
func Load(path string) (Identity, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Identity{}, err
	}
	var id Identity
	if err := json.Unmarshal(data, &id); err != nil {
		return Identity{}, fmt.Errorf("parsing %s: %w", path, err)
	}
	return id, nil
}

// Expect is what the process a pid file names must be when no identity was
// recorded for it.
type Expect struct {
	// Program is its argv[0] base name; "" skips the check.
	Program string
	// Exe is the binary it must run (symlinks are resolved); "" skips the
	// check.
	Exe string
}

// Owned returns the identity of the live process pidFile names if it is
// the process the file was written for: the identity recorded in
// IDFile(pidFile) for that PID decides; without one, the process must have
// started around the file's last write and run what expect says. The error
// wraps ErrNotOurs when the PID went to another process, ErrNotRunning when
// none runs.
func Owned(pidFile string, expect Expect) (Identity, error) {
	pid := Read(pidFile)
	if pid == 0 {
		return Identity{}, fmt.Errorf("%s: %w", pidFile, ErrNotRunning)
	}
	now, err := Of(pid)
	if err != nil {
		return Identity{}, err
	}
	if rec, err := Load(IDFile(pidFile)); err == nil && rec.PID == pid {
		return now, rec.Same(now)
	}
	started, written, err := verify(pidFile, pid, expect.Program)
	if err != nil {
		return Identity{}, err
	}
	if started.Before(written.Add(-slackBefore)) {
		return Identity{}, fmt.Errorf("pid %d started at %s, long before %s was written at %s: %w",
			pid, started.Format(time.RFC3339), pidFile, written.Format(time.RFC3339), ErrNotOurs)
	}
	if expect.Exe != "" {
		want := expect.Exe
		if resolved, err := filepath.EvalSymlinks(want); err == nil {
			want = resolved
		}
		if now.Exe != want {
			return Identity{}, fmt.Errorf("pid %d runs %q, not %s: %w", pid, now.Exe, want, ErrNotOurs)
		}
	}
	return now, nil
}

// startTicks is field 22 of /proc/<pid>/stat.
func startTicks(pid int) (uint64, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("pid %d: start time %q: %w", pid, fields[19], err)
	}
	return ticks, nil
}

// state is field 3 of /proc/<pid>/stat ("Z" for a zombie).
func state(pid int) (string, error) {
	fields, err := statFields(pid)
	if err != nil {
		return "", err
	}
	return fields[0], nil
}

// statFields are the fields of /proc/<pid>/stat after the parenthesised
// command name (which may hold spaces): the state (field 3) first, the
// start time (22) 20th.
func statFields(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNotRunning)
	}
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("pid %d: short /proc stat", pid)
	}
	return fields, nil
}
