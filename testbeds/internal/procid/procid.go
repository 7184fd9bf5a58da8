// Package procid tells whether the PID in a pid file is still the process
// that file was written for, before anyone signals it.
//
// A pid file outlives its process, and the kernel hands the number to the
// next program. That program started after ours exited, so after the pid
// file was written: a live process whose start time is later than the
// file's last write is someone else's. With the program's name checked too,
// a reused PID is never signalled.
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
	info, err := os.Stat(pidFile)
	if err != nil {
		return err
	}
	started, err := StartTime(pid)
	if err != nil {
		return err
	}
	if started.After(info.ModTime().Add(slack)) {
		return fmt.Errorf("pid %d started at %s, after %s was written at %s: %w",
			pid, started.Format(time.RFC3339), pidFile, info.ModTime().Format(time.RFC3339), ErrNotOurs)
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

// Program is the base name of the program pid runs (argv[0]).
func Program(pid int) (string, error) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "", fmt.Errorf("reading the command of pid %d: %w", pid, err)
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return filepath.Base(string(argv0)), nil
}

// StartTime is when pid started: field 22 of /proc/<pid>/stat, clock ticks
// after boot.
func StartTime(pid int) (time.Time, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, err
	}
	// Fields after the parenthesised command name, which may hold spaces;
	// the state is field 3, so the start time (22) is the 20th here.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 20 {
		return time.Time{}, fmt.Errorf("pid %d: short /proc stat", pid)
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("pid %d: start time %q: %w", pid, fields[19], err)
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
