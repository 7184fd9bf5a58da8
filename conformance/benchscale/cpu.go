package benchscale

import (
	"os"
	"strconv"
	"strings"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times: 100
// on every architecture Go's linux ports run on.
const clockTicks = 100

// cpuSeconds reads each process's user+system CPU so far; a process that
// is gone reads as absent.
func cpuSeconds(procs map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range procs {
		if s, ok := processCPU(pid); ok {
			out[name] = s
		}
	}
	return out
}

// processCPU parses utime and stime from /proc/<pid>/stat.
func processCPU(pid int) (float64, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	return parseStat(string(data))
}

// parseStat reads fields 14 and 15 (utime, stime) of a stat line. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from its last ')'.
func parseStat(line string) (float64, bool) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return 0, false
	}
	fields := strings.Fields(line[end+1:])
	// fields[0] is field 3 (state); utime is field 14.
	if len(fields) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(utime+stime) / clockTicks, true
}
