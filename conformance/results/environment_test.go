package results

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadHost(t *testing.T) {
	proc := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
	write("meminfo", "MemTotal:       24683756 kB\nMemFree:        21161252 kB\n")
	write("sys/kernel/osrelease", "6.8.0-45-generic\n")
	h := readHost(proc, 2)
	want := Host{CPUs: 2, CPUModel: "AMD EPYC 7B13", MemoryBytes: 24683756 * 1024, Kernel: "6.8.0-45-generic"}
	if h != want {
		t.Errorf("host %+v, want %+v", h, want)
	}
	if h.MemoryGiB() != 24 || h.String() != "2 CPUs (AMD EPYC 7B13), 24 GiB, kernel 6.8.0-45-generic" {
		t.Errorf("host %d GiB, %q", h.MemoryGiB(), h.String())
	}
	// Where /proc says nothing (no model name on some ARM kernels), the
	// fields stay empty.
	if h := readHost(t.TempDir(), 4); h != (Host{CPUs: 4}) || !h.Recorded() || h.String() != "4 CPUs" {
		t.Errorf("host from an empty /proc: %+v %q", h, h.String())
	}
	if h := LocalHost(); !h.Recorded() {
		t.Errorf("LocalHost recorded no CPUs: %+v", h)
	}
}

// TestEnvironmentHostJSON: the host and scheduler are written under
// environment, and results without them (older v2, v1) read with them
// empty: host not recorded, scheduler volcano.
func TestEnvironmentHostJSON(t *testing.T) {
	e := Environment{Profile: "local", Scheduler: "kubernetes", SchedulerVersion: "v1.36.0", Host: Host{CPUs: 2, CPUModel: "AMD EPYC", MemoryBytes: 8 << 30, Kernel: "6.8.0"}}
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"scheduler":"kubernetes"`, `"schedulerVersion":"v1.36.0"`, `"host":{"cpus":2,"cpuModel":"AMD EPYC","memoryBytes":8589934592,"kernel":"6.8.0"}`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %s", data, want)
		}
	}
	data, _ = json.Marshal(Environment{Profile: "local"})
	if strings.Contains(string(data), "host") || strings.Contains(string(data), "mergedRuns") {
		t.Errorf("an unrecorded host or a run is written: %s", data)
	}
	r, err := Read(filepath.Join("testdata", "v1-run.json")) // v1
	if err != nil {
		t.Fatal(err)
	}
	if r.Environment.Host.Recorded() || r.Environment.SchedulerName() != SchedulerVolcano {
		t.Errorf("v1 environment %+v: want no host, scheduler volcano", r.Environment)
	}
}
