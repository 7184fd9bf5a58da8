package measure

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// NvidiaSMIQuery is the nvidia-smi command line whose output
// ParseNvidiaSMICSV reads. --format=csv,noheader,nounits parses too.
var NvidiaSMIQuery = []string{"nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv"}

// SMIGPU is one GPU as nvidia-smi lists it. Index is nvidia-smi's, which
// in a container numbers the GPUs it sees from 0: only UUID names a GPU
// across pods and nodes. Name and MemoryMiB are empty and 0 where
// nvidia-smi printed a bracketed value ([N/A], [Not Supported], ...).
type SMIGPU struct {
	Index     int
	UUID      string
	Name      string
	MemoryMiB int64
}

// smiColumns are the query's columns, in the order nvidia-smi prints
// them without a header.
var smiColumns = []string{"index", "uuid", "name", "memory.total"}

// ParseNvidiaSMICSV reads `nvidia-smi --query-gpu=index,uuid,name,memory.total`
// in CSV: with or without the header (a first line with a uuid column is
// the header, and then the columns are found by name, in any order, others
// ignored), memory.total as "81559 MiB" or, with nounits, "81559". Blank
// lines are skipped; any other line that is not a GPU is an error naming
// its line, so nvidia-smi's own failure ("NVIDIA-SMI has failed ...") is
// never read as no GPUs.
//
// An unavailable name or memory.total ([N/A], [Not Supported]) still
// parses, as "" and 0, since the index and UUID name the GPU: the
// comparisons report the unknown value instead of passing it. An
// unavailable index or UUID is an error, as is a UUID seen twice.
func ParseNvidiaSMICSV(r io.Reader) ([]SMIGPU, error) {
	var (
		out    []SMIGPU
		col    map[string]int // column → field; nil until the first line
		width  int
		seenAt = map[string]int{} // UUID → line
		lineNo int
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		if col == nil {
			var err error
			col, width, err = smiHeader(fields)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			if width > 0 {
				continue // it was the header
			}
			width = len(smiColumns)
		}
		if len(fields) != width {
			return nil, fmt.Errorf("line %d: %d fields, want %d: %q", lineNo, len(fields), width, clip(line))
		}
		g, err := smiRow(fields, col)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w: %q", lineNo, err, clip(line))
		}
		if at, dup := seenAt[g.UUID]; dup {
			return nil, fmt.Errorf("line %d: GPU %s already listed on line %d", lineNo, g.UUID, at)
		}
		seenAt[g.UUID] = lineNo
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// smiHeader reads the first line: the header's columns and width if it has
// a uuid column, else the headerless order and width 0.
func smiHeader(fields []string) (map[string]int, int, error) {
	col := map[string]int{}
	for i, f := range fields {
		// "memory.total [MiB]": the unit is not part of the name.
		name, _, _ := strings.Cut(f, " [")
		col[strings.ToLower(strings.TrimSpace(name))] = i
	}
	if _, ok := col["uuid"]; !ok {
		col = map[string]int{}
		for i, c := range smiColumns {
			col[c] = i
		}
		return col, 0, nil
	}
	for _, c := range smiColumns {
		if _, ok := col[c]; !ok {
			return nil, 0, fmt.Errorf("the header has no %s column: %q", c, clip(strings.Join(fields, ", ")))
		}
	}
	return col, len(fields), nil
}

func smiRow(fields []string, col map[string]int) (SMIGPU, error) {
	var g SMIGPU
	index, uuid := fields[col["index"]], fields[col["uuid"]]
	if unavailable(index) {
		return g, fmt.Errorf("index unavailable (%s)", index)
	}
	i, err := strconv.Atoi(index)
	if err != nil || i < 0 {
		return g, fmt.Errorf("index %q is not a GPU index", index)
	}
	if unavailable(uuid) {
		return g, fmt.Errorf("uuid unavailable (%s)", uuid)
	}
	if !strings.HasPrefix(uuid, "GPU-") || len(uuid) == len("GPU-") {
		return g, fmt.Errorf("uuid %q is not a GPU UUID (GPU-...)", uuid)
	}
	g.Index, g.UUID = i, uuid
	if name := fields[col["name"]]; !unavailable(name) {
		g.Name = name
	}
	if mem := fields[col["memory.total"]]; !unavailable(mem) {
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(mem, "MiB")), 10, 64)
		if err != nil || n <= 0 {
			return g, fmt.Errorf("memory.total %q is not a size in MiB", mem)
		}
		g.MemoryMiB = n
	}
	return g, nil
}

// unavailable is nvidia-smi's bracketed value for a field it could not
// read: [N/A], [Not Supported], [Unknown Error], [Insufficient Permissions].
func unavailable(field string) bool {
	return strings.HasPrefix(field, "[") && strings.HasSuffix(field, "]")
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// MemoryTolerance is how far nvidia-smi's memory.total may be from the
// inventory's, as a fraction of the inventory's: both read NVML's total,
// but the agent floors bytes to MiB and drivers differ in what they
// reserve, while the wrong part is off by far more (H100 80GB against
// H100 NVL's 94GB is 17%, A100 40GB against 80GB half).
const MemoryTolerance = 0.01

// CompareWithInventory lists where what nvidia-smi saw in a pod holding all
// of a node's GPUs differs from the node's GPUInventory: the count, the UUID
// set (GPUs are matched by UUID, not index), each GPU's product (NVML's name
// and GFD's label form both compare, "NVIDIA H100 80GB HBM3" equals
// "NVIDIA-H100-80GB-HBM3") and memory (within MemoryTolerance). A value
// either side could not read is a difference too. Nothing listed means they
// agree.
func CompareWithInventory(seen []SMIGPU, inv gpulabv1alpha1.GPUInventoryStatus) []string {
	var out []string
	if len(seen) != len(inv.GPUs) {
		out = append(out, fmt.Sprintf("nvidia-smi sees %d GPUs, the inventory lists %d", len(seen), len(inv.GPUs)))
	}
	byUUID := map[string]gpulabv1alpha1.GPUDevice{}
	for _, g := range inv.GPUs {
		byUUID[g.UUID] = g
	}
	seenUUID := map[string]bool{}
	for _, s := range seen {
		seenUUID[s.UUID] = true
		g, ok := byUUID[s.UUID]
		if !ok {
			out = append(out, fmt.Sprintf("nvidia-smi sees GPU %s (index %d), which is not in the inventory", s.UUID, s.Index))
			continue
		}
		switch {
		case s.Name == "":
			out = append(out, fmt.Sprintf("GPU %s: nvidia-smi could not read its name (the inventory says %q)", s.UUID, g.Product))
		case g.Product == "":
			out = append(out, fmt.Sprintf("GPU %s: the inventory has no product (nvidia-smi says %q)", s.UUID, s.Name))
		case productKey(s.Name) != productKey(g.Product):
			out = append(out, fmt.Sprintf("GPU %s: nvidia-smi says %q, the inventory %q", s.UUID, s.Name, g.Product))
		}
		switch {
		case s.MemoryMiB == 0:
			out = append(out, fmt.Sprintf("GPU %s: nvidia-smi could not read its memory (the inventory says %d MiB)", s.UUID, g.MemoryMiB))
		case g.MemoryMiB == 0:
			out = append(out, fmt.Sprintf("GPU %s: the inventory has no memory (nvidia-smi says %d MiB)", s.UUID, s.MemoryMiB))
		case !memoryAgrees(s.MemoryMiB, g.MemoryMiB):
			out = append(out, fmt.Sprintf("GPU %s: nvidia-smi says %d MiB, the inventory %d MiB (more than %g%% apart)", s.UUID, s.MemoryMiB, g.MemoryMiB, MemoryTolerance*100))
		}
	}
	for _, g := range inv.GPUs {
		if !seenUUID[g.UUID] {
			out = append(out, fmt.Sprintf("the inventory's GPU %d (%s) is not seen by nvidia-smi", g.Index, g.UUID))
		}
	}
	return out
}

func memoryAgrees(seen, want int64) bool {
	d := seen - want
	if d < 0 {
		d = -d
	}
	return float64(d) <= MemoryTolerance*float64(want)
}

// productKey is a product name in GFD's label form, as the agent writes
// the summary and label from NVML's name (node-agent/internal/labels):
// spaces and any character a label value cannot hold become dashes, the
// ends trimmed to alphanumerics.
func productKey(s string) string {
	b := []byte(strings.TrimSpace(s))
	for i, c := range b {
		if !alnum(c) && c != '-' && c != '_' && c != '.' {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-_.")
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// CheckSubset lists where what nvidia-smi saw in a pod that requested
// requested of a node's GPUs breaks secure accelerator access: it must see
// exactly requested GPUs, each one of the node's (by the node's
// GPUInventory). Nothing listed means it holds.
func CheckSubset(seen []SMIGPU, requested int, node gpulabv1alpha1.GPUInventoryStatus) []string {
	var out []string
	if len(seen) != requested {
		out = append(out, fmt.Sprintf("nvidia-smi sees %d GPUs, the pod requested %d", len(seen), requested))
	}
	mine := map[string]bool{}
	for _, g := range node.GPUs {
		mine[g.UUID] = true
	}
	for _, s := range seen {
		if !mine[s.UUID] {
			out = append(out, fmt.Sprintf("nvidia-smi sees GPU %s (index %d), which is not one of the node's %d", s.UUID, s.Index, len(node.GPUs)))
		}
	}
	return out
}

// Disjoint lists the GPUs that two pods' nvidia-smi both saw: pods holding
// their GPUs at the same time must share none.
func Disjoint(a, b []SMIGPU) []string {
	inA := map[string]bool{}
	for _, g := range a {
		inA[g.UUID] = true
	}
	var out []string
	for _, g := range b {
		if inA[g.UUID] {
			out = append(out, fmt.Sprintf("GPU %s is seen by both pods", g.UUID))
		}
	}
	return out
}

// CheckClaimed lists where what nvidia-smi saw in a pod whose GPUs came
// through a ResourceClaim breaks secure accelerator access: it must see
// exactly the claim's allocated devices, by the UUIDs their ResourceSlice
// publishes (the uuid attribute of NVIDIA's DRA driver and gpulab's
// agent). Nothing listed means it holds.
func CheckClaimed(seen []SMIGPU, allocated []string) []string {
	var out []string
	if len(seen) != len(allocated) {
		out = append(out, fmt.Sprintf("nvidia-smi sees %d GPUs, the claim was allocated %d", len(seen), len(allocated)))
	}
	mine := map[string]bool{}
	for _, u := range allocated {
		mine[u] = true
	}
	saw := map[string]bool{}
	for _, s := range seen {
		saw[s.UUID] = true
		if !mine[s.UUID] {
			out = append(out, fmt.Sprintf("nvidia-smi sees GPU %s (index %d), which the claim was not allocated", s.UUID, s.Index))
		}
	}
	for _, u := range allocated {
		if !saw[u] {
			out = append(out, fmt.Sprintf("the claim was allocated GPU %s, which nvidia-smi does not see", u))
		}
	}
	return out
}
