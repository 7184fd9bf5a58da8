package results

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Host is the machine the suite ran on: on the local testbed also the
// machine the whole cluster ran on, so its numbers depend on it.
type Host struct {
	// CPUs is runtime.NumCPU() of the suite's process; 0 where the run did
	// not record a host (results written before host fields).
	CPUs int `json:"cpus,omitempty"`
	// CPUModel is /proc/cpuinfo's first "model name" ("" where there is
	// none, as on some ARM kernels).
	CPUModel string `json:"cpuModel,omitempty"`
	// MemoryBytes is /proc/meminfo's MemTotal.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// Kernel is the kernel release (/proc/sys/kernel/osrelease).
	Kernel string `json:"kernel,omitempty"`
}

// Recorded says whether the run recorded its host at all.
func (h Host) Recorded() bool { return h.CPUs > 0 }

// MemoryGiB is MemoryBytes rounded to whole GiB, so two machines of one
// size whose kernels reserve a little differently are one class.
func (h Host) MemoryGiB() int { return int(math.Round(float64(h.MemoryBytes) / (1 << 30))) }

// String is "2 CPUs (AMD EPYC), 24 GiB, kernel 6.8.0", or "not recorded".
func (h Host) String() string {
	if !h.Recorded() {
		return "not recorded"
	}
	s := fmt.Sprintf("%d CPUs", h.CPUs)
	if h.CPUModel != "" {
		s += " (" + h.CPUModel + ")"
	}
	if h.MemoryBytes > 0 {
		s += fmt.Sprintf(", %d GiB", h.MemoryGiB())
	}
	if h.Kernel != "" {
		s += ", kernel " + h.Kernel
	}
	return s
}

// LocalHost describes the machine this process runs on.
func LocalHost() Host { return readHost("/proc", runtime.NumCPU()) }

// readHost reads the host from a /proc tree at proc; what cannot be read
// stays empty.
func readHost(proc string, cpus int) Host {
	h := Host{CPUs: cpus}
	h.CPUModel = procField(filepath.Join(proc, "cpuinfo"), "model name")
	if total := procField(filepath.Join(proc, "meminfo"), "MemTotal"); total != "" {
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(total, "kB")), 10, 64)
		if err == nil {
			h.MemoryBytes = kb * 1024
		}
	}
	if release, err := os.ReadFile(filepath.Join(proc, "sys", "kernel", "osrelease")); err == nil {
		h.Kernel = strings.TrimSpace(string(release))
	}
	return h
}

// procField is the value of the first "key: value" line of a /proc file,
// or "".
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// SchedulerVolcano is the gang scheduler of every run that does not name
// one: the only one before the Kubernetes backend.
const SchedulerVolcano = "volcano"

// GPUAllocationName is how the run's gangs asked for GPUs; runs from
// before the choice used the extended resource.
func (e Environment) GPUAllocationName() string {
	if e.GPUAllocation == "" {
		return "extended-resource"
	}
	return e.GPUAllocation
}

// SchedulerName is who gang-scheduled; results from before the field were
// all Volcano.
func (e Environment) SchedulerName() string {
	if e.Scheduler == "" {
		return SchedulerVolcano
	}
	return e.Scheduler
}
