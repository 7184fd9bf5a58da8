package nvml

import (
	"os"
	"path/filepath"
	"testing"
)

// TestNUMANodeFromSysfs: NVML's bus id names the sysfs device (4-digit
// domain, lower case); -1, a missing file or garbage mean unknown.
func TestNUMANodeFromSysfs(t *testing.T) {
	dir := t.TempDir()
	for id, v := range map[string]string{"0000:9a:00.0": "1\n", "0000:18:00.0": "0\n", "0000:07:00.0": "-1\n", "0000:0f:00.0": "x"} {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, id, "numa_node"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for busID, want := range map[string]int{
		"00000000:9A:00.0": 1, "00000000:18:00.0": 0, "00000000:07:00.0": -1, "00000000:0F:00.0": -1, "00000000:DB:00.0": -1,
	} {
		if got := numaNodeIn(dir, busID); got != want {
			t.Errorf("%s: NUMA node %d, want %d", busID, got, want)
		}
	}
}
