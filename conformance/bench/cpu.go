package bench

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times: 100
// on every architecture Go's linux ports run on.
const clockTicks = 100

// SuiteProcess names the conformance suite's own process in the CPU
// tables: it watches every pod and gang of the run, like any controller.
const SuiteProcess = "gpulab-conformance"

// CPUSeconds reads each process's user+system CPU so far; a process that
// is gone reads as absent.
func CPUSeconds(procs map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range procs {
		if s, ok := ProcessCPU(pid); ok {
			out[name] = s
		}
	}
	return out
}

// ProcessCPU is the user+system CPU seconds pid has used so far, from
// /proc/<pid>/stat; false when the process is gone.
func ProcessCPU(pid int) (float64, bool) {
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

// CPUSample is the CPU every measured process, and the whole machine, had
// spent at one instant.
type CPUSample struct {
	At    time.Time
	Procs map[string]float64
	// Busy and Total are the machine's CPU seconds over all cores: busy,
	// and busy plus idle.
	Busy, Total float64
}

// Sampler samples the CPU of a set of processes every interval until
// stopped.
type Sampler struct {
	stop    chan struct{}
	samples chan []CPUSample
}

// SampleCPU starts sampling procs (name to pid) every interval, the first
// sample at once; Stop takes a last one and returns them all.
func SampleCPU(procs map[string]int, every time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{}), samples: make(chan []CPUSample, 1)}
	go func() {
		var out []CPUSample
		take := func() {
			busy, total, _ := machineCPU()
			out = append(out, CPUSample{At: time.Now(), Procs: CPUSeconds(procs), Busy: busy, Total: total})
		}
		take()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				take()
			case <-s.stop:
				take()
				s.samples <- out
				return
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the samples, oldest first: at least
// two.
func (s *Sampler) Stop() []CPUSample {
	close(s.stop)
	return <-s.samples
}

// machineCPU reads the machine's busy and total CPU seconds, all cores,
// from the first line of /proc/stat.
func machineCPU() (busy, total float64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return parseMachineStat(line)
}

// parseMachineStat reads "cpu user nice system idle iowait irq softirq
// steal ...": guest time is already counted in user and nice, and idle
// and iowait are the CPU nobody used.
func parseMachineStat(line string) (busy, total float64, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, false
	}
	var sum, idle uint64
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		sum += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return float64(sum-idle) / clockTicks, float64(sum) / clockTicks, true
}

// CPUWindow is what the machine's CPU did in a window of time (the burst,
// or the testbed at rest), widened to the samples either side (at most one
// interval each way).
type CPUWindow struct {
	Seconds float64 `json:"seconds"`
	// CPUSeconds is each process's CPU in the window.
	CPUSeconds map[string]float64 `json:"cpuSeconds"`
	// MachineSeconds is the machine's CPU capacity in the window (wall
	// time x cores), and Idle the share of it nobody used.
	MachineSeconds float64 `json:"machineSeconds"`
	Idle           float64 `json:"idle"`
}

// WindowOf is the CPU spent between from and to: the last sample at or
// before from to the first at or after to. False without samples on both
// sides.
func WindowOf(samples []CPUSample, from, to time.Time) (CPUWindow, bool) {
	first, last := -1, -1
	for i, s := range samples {
		if !s.At.After(from) {
			first = i
		}
		if last < 0 && !s.At.Before(to) {
			last = i
		}
	}
	if first < 0 || last < 0 || last <= first {
		return CPUWindow{}, false
	}
	a, b := samples[first], samples[last]
	out := CPUWindow{Seconds: b.At.Sub(a.At).Seconds(), CPUSeconds: map[string]float64{}, MachineSeconds: b.Total - a.Total}
	if out.MachineSeconds > 0 {
		out.Idle = 1 - (b.Busy-a.Busy)/out.MachineSeconds
	}
	for name, end := range b.Procs {
		if start, ok := a.Procs[name]; ok {
			out.CPUSeconds[name] = end - start
		}
	}
	return out, true
}
