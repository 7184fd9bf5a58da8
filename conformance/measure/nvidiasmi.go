package measure

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// nvidiaSMIUUID matches a line of `nvidia-smi -L`:
// "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6a708353-...)".
var nvidiaSMIUUID = regexp.MustCompile(`^GPU (\d+): .*\(UUID: (GPU-[0-9a-fA-F-]+)\)`)

// ParseNvidiaSMIL returns the GPU UUIDs by index from `nvidia-smi -L`; MIG
// device lines are ignored.
func ParseNvidiaSMIL(r io.Reader) (map[int]string, error) {
	out := map[int]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := nvidiaSMIUUID.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		var idx int
		if _, err := fmt.Sscan(m[1], &idx); err != nil {
			return nil, err
		}
		out[idx] = m[2]
	}
	return out, sc.Err()
}
