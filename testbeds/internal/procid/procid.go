// Package procid tells whether the PID in a pid file is still the process
// that file was written for, before anyone signals it.
//
// A pid file outlives its process, and the kernel hands the number to the
// next program. Whoever starts a process records its Identity (start time in
// clock ticks, boot, executable) beside the pid file; Owned compares the live
// process with it, and Signal checks it again through a pidfd, so a reused
// PID is never signalled. A pid file with no record (written by a tool such
// as kwokctl before gpulab saw the process) is checked by its time and the
// program: the process must have started around the file's last write (not
// after it, as one that got a reused number did) and run the binary the
// caller configured.
package procid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNotOurs says the PID now belongs to another process.
var ErrNotOurs = errors.New("not the process the pid file was written for")

// slack covers the pid file's timestamp granularity and the start time's
// clock ticks (10 ms).
const slack = time.Second

// Read returns the PID in pidFile, or 0 when the file is missing or holds
// no positive number.
func Read(pidFile string) int {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Verify checks that pid, read from pidFile, is alive in /proc, runs a
// program whose base name is program (when program is not empty), and
// started no later than pidFile was last written. The error wraps
// ErrNotOurs when the PID went to another process.
func Verify(pidFile string, pid int, program string) error {
	_, _, err := verify(pidFile, pid, program)
	return err
}

// verify is Verify, returning the start time and the pid file's last write
// it compared, for Owned's further check.
func verify(pidFile string, pid int, program string) (started, written time.Time, err error) {
	info, err := os.Stat(pidFile)
	if err != nil {
		return started, written, err
	}
	written = info.ModTime()
	if started, err = StartTime(pid); err != nil {
		return started, written, err
	}
	if started.After(written.Add(slack)) {
		return started, written, fmt.Errorf("pid %d started at %s, after %s was written at %s: %w",
			pid, started.Format(time.RFC3339), pidFile, written.Format(time.RFC3339), ErrNotOurs)
	}
	return started, written, checkProgram(pid, program)
}

// checkProgram says whether pid still runs (not a zombie) a program whose
// base name is program ("" skips the name).
func checkProgram(pid int, program string) error {
	// A zombie's command line and executable are gone: nothing to compare,
	// and nothing that runs.
	if s, err := state(pid); err != nil || s == "Z" {
		return fmt.Errorf("pid %d has exited: %w", pid, ErrNotRunning)
	}
	if program == "" {
		return nil
	}
	name, err := Program(pid)
	if err != nil {
		return err
	}
	if name != program {
		return fmt.Errorf("pid %d runs %q, not %s: %w", pid, name, program, ErrNotOurs)
	}
	return nil
}

// execSettle bounds the wait for a just-started process's arguments.
const execSettle = 2 * time.Second

// Program is the base name of the program pid runs (argv[0]).
//
// exec.Cmd.Start returns once the child's execve has closed its
// close-on-exec files, which the kernel does before it lays out the new
// program's arguments: for a moment /proc/PID/cmdline is empty. An empty
// one of a live process is read again until it is set.
func Program(pid int) (string, error) {
	deadline := time.Now().Add(execSettle)
	for {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return "", fmt.Errorf("reading the command of pid %d: %w", pid, err)
		}
		if len(cmdline) > 0 {
			argv0, _, _ := bytes.Cut(cmdline, []byte{0})
			return filepath.Base(string(argv0)), nil
		}
		if s, err := state(pid); err != nil || s == "Z" || time.Now().After(deadline) {
			return "", fmt.Errorf("pid %d has no command line (exited, or a kernel thread)", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// StartTime is when pid started, from its start ticks and the boot time.
func StartTime(pid int) (time.Time, error) {
	ticks, err := startTicks(pid)
	if err != nil {
		return time.Time{}, err
	}
	boot, err := bootTime()
	if err != nil {
		return time.Time{}, err
	}
	return boot.Add(time.Duration(ticks) * time.Second / clockTicks), nil
}

// clockTicks is USER_HZ, 100 on every Linux architecture gpulab runs on.
const clockTicks = 100

var (
	bootOnce sync.Once
	boot     time.Time
	bootErr  error
)

// bootTime is btime from /proc/stat.
func bootTime() (time.Time, error) {
	bootOnce.Do(func() {
		data, err := os.ReadFile("/proc/stat")
		if err != nil {
			bootErr = err
			return
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "btime "); ok {
				secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					bootErr = fmt.Errorf("btime in /proc/stat: %w", err)
					return
				}
				boot = time.Unix(secs, 0)
				return
			}
		}
		bootErr = errors.New("no btime in /proc/stat")
	})
	return boot, bootErr
}
