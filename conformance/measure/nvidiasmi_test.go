package measure

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// The samples in testdata/nvidia-smi are nvidia-smi's output for
// NvidiaSMIQuery as it prints it, on 8-GPU H100 SXM, H200 and A100 SXM4
// 80GB nodes, in a pod holding 2 of the H100 node's GPUs (noheader,nounits),
// for a GPU whose memory it could not read, and without a driver.
func sample(t *testing.T, name string) []SMIGPU {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "nvidia-smi", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gpus, err := ParseNvidiaSMICSV(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return gpus
}

func TestParseNvidiaSMICSVSamples(t *testing.T) {
	for _, tc := range []struct {
		file   string
		n      int
		name   string
		memory []int64 // by index; one value for all
	}{
		{"h100-sxm-8.csv", 8, "NVIDIA H100 80GB HBM3", []int64{81559}},
		{"h200-sxm-8.csv", 8, "NVIDIA H200", []int64{143771}},
		{"a100-sxm4-80gb-8.csv", 8, "NVIDIA A100-SXM4-80GB", []int64{81920}},
		{"h100-sxm-2of8-noheader-nounits.csv", 2, "NVIDIA H100 80GB HBM3", []int64{81559}},
		{"h100-sxm-memory-na.csv", 2, "NVIDIA H100 80GB HBM3", []int64{81559, 0}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			gpus := sample(t, tc.file)
			if len(gpus) != tc.n {
				t.Fatalf("parsed %d GPUs, want %d: %+v", len(gpus), tc.n, gpus)
			}
			for i, g := range gpus {
				mem := tc.memory[0]
				if len(tc.memory) > 1 {
					mem = tc.memory[i]
				}
				if g.Index != i || !strings.HasPrefix(g.UUID, "GPU-") || len(g.UUID) != len("GPU-6a708353-a26b-bce2-e87e-14d66a2ad107") || g.Name != tc.name || g.MemoryMiB != mem {
					t.Errorf("GPU %d parsed as %+v, want index %d, a GPU UUID, %q, %d MiB", i, g, i, tc.name, mem)
				}
			}
		})
	}
	// The pod's 2 GPUs are the node's 5 and 2, numbered from 0 in the pod.
	all, two := sample(t, "h100-sxm-8.csv"), sample(t, "h100-sxm-2of8-noheader-nounits.csv")
	if two[0].UUID != all[5].UUID || two[1].UUID != all[2].UUID {
		t.Errorf("the pod's GPUs are %s and %s, want the node's 5 (%s) and 2 (%s)", two[0].UUID, two[1].UUID, all[5].UUID, all[2].UUID)
	}
}

func TestParseNvidiaSMICSVColumnsByHeader(t *testing.T) {
	out := `uuid, memory.total [MiB], pci.bus_id, name, index
GPU-6a708353-a26b-bce2-e87e-14d66a2ad107, 81559 MiB, 00000000:18:00.0, NVIDIA H100 80GB HBM3, 3
GPU-2c88c562-874f-d508-e050-f7ecb384b575, [Not Supported], 00000000:2A:00.0, [Not Supported], 4

`
	got, err := ParseNvidiaSMICSV(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []SMIGPU{
		{Index: 3, UUID: "GPU-6a708353-a26b-bce2-e87e-14d66a2ad107", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
		{Index: 4, UUID: "GPU-2c88c562-874f-d508-e050-f7ecb384b575"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
}

func TestParseNvidiaSMICSVErrors(t *testing.T) {
	noDriver, err := os.ReadFile(filepath.Join("testdata", "nvidia-smi", "no-driver.txt"))
	if err != nil {
		t.Fatal(err)
	}
	const header = "index, uuid, name, memory.total [MiB]\n"
	const gpu0 = "0, GPU-6a708353-a26b-bce2-e87e-14d66a2ad107, NVIDIA H100 80GB HBM3, 81559 MiB\n"
	for _, tc := range []struct{ what, out, want string }{
		{"no driver", string(noDriver), "line 1: 1 fields, want 4"},
		{"no devices", "No devices were found\n", "line 1: 1 fields, want 4"},
		{"a short line", header + gpu0 + "1, GPU-2c88c562-874f-d508-e050-f7ecb384b575, NVIDIA H100 80GB HBM3\n", "line 3: 3 fields, want 4"},
		{"a short line without header", gpu0 + "\n1, GPU-2c88c562-874f-d508-e050-f7ecb384b575\n", "line 3: 2 fields, want 4"},
		{"a bad index", header + "x, GPU-6a708353-a26b-bce2-e87e-14d66a2ad107, NVIDIA H100 80GB HBM3, 81559 MiB\n", `line 2: index "x" is not a GPU index`},
		{"an unavailable index", header + "[N/A], GPU-6a708353-a26b-bce2-e87e-14d66a2ad107, NVIDIA H100 80GB HBM3, 81559 MiB\n", "line 2: index unavailable ([N/A])"},
		{"an unavailable UUID", header + gpu0 + "1, [N/A], NVIDIA H100 80GB HBM3, 81559 MiB\n", "line 3: uuid unavailable ([N/A])"},
		{"a MIG UUID", header + "0, MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, NVIDIA H100 80GB HBM3, 81559 MiB\n", `line 2: uuid "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee" is not a GPU UUID`},
		{"memory in GiB", header + "0, GPU-6a708353-a26b-bce2-e87e-14d66a2ad107, NVIDIA H100 80GB HBM3, 80 GiB\n", `line 2: memory.total "80 GiB" is not a size in MiB`},
		{"a UUID twice", header + gpu0 + strings.Replace(gpu0, "0,", "1,", 1), "line 3: GPU GPU-6a708353-a26b-bce2-e87e-14d66a2ad107 already listed on line 2"},
		{"a header without memory", "index, uuid, name\n", "line 1: the header has no memory.total column"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			got, err := ParseNvidiaSMICSV(strings.NewReader(tc.out))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parsed %+v, error %v; want an error with %q", got, err, tc.want)
			}
		})
	}
}

// inventoryOf is the GPUInventory status the agent writes for the GPUs
// nvidia-smi lists: NVML's name and memory, by index.
func inventoryOf(gpus []SMIGPU) gpulabv1alpha1.GPUInventoryStatus {
	var st gpulabv1alpha1.GPUInventoryStatus
	for _, g := range gpus {
		st.GPUs = append(st.GPUs, gpulabv1alpha1.GPUDevice{Index: int32(g.Index), UUID: g.UUID, Product: g.Name, MemoryMiB: g.MemoryMiB})
	}
	st.Summary = gpulabv1alpha1.InventorySummary{Count: int32(len(gpus)), Healthy: int32(len(gpus))}
	return st
}

func TestCompareWithInventory(t *testing.T) {
	h100 := sample(t, "h100-sxm-8.csv")
	for _, tc := range []struct {
		what  string
		seen  []SMIGPU
		node  []SMIGPU // the inventory's GPUs; seen's if nil
		edit  func(*gpulabv1alpha1.GPUInventoryStatus)
		wants []string // each a message, in order
	}{
		{what: "the same GPUs", seen: h100},
		{what: "the H200 sample against itself", seen: sample(t, "h200-sxm-8.csv")},
		{what: "the A100 sample against itself", seen: sample(t, "a100-sxm4-80gb-8.csv")},
		{what: "GFD's product form and memory within 1%", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) {
			for i := range st.GPUs {
				st.GPUs[i].Product, st.GPUs[i].MemoryMiB = "NVIDIA-H100-80GB-HBM3", 81559+815
			}
		}},
		{what: "one GPU fewer in the inventory", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) { st.GPUs = st.GPUs[:7] },
			wants: []string{"nvidia-smi sees 8 GPUs, the inventory lists 7", "nvidia-smi sees GPU " + h100[7].UUID + " (index 7), which is not in the inventory"}},
		{what: "one GPU fewer seen", seen: h100[1:], node: h100,
			wants: []string{"nvidia-smi sees 7 GPUs, the inventory lists 8", "the inventory's GPU 0 (" + h100[0].UUID + ") is not seen by nvidia-smi"}},
		{what: "another UUID", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) {
			st.GPUs[3].UUID = "GPU-6a708353-a26b-bce2-e87e-14d66a2ad107"
		},
			wants: []string{"nvidia-smi sees GPU " + h100[3].UUID + " (index 3), which is not in the inventory", "the inventory's GPU 3 (GPU-6a708353-a26b-bce2-e87e-14d66a2ad107) is not seen by nvidia-smi"}},
		{what: "another product", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) { st.GPUs[2].Product = "NVIDIA H100 PCIe" },
			wants: []string{"GPU " + h100[2].UUID + `: nvidia-smi says "NVIDIA H100 80GB HBM3", the inventory "NVIDIA H100 PCIe"`}},
		{what: "no product in the inventory", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) { st.GPUs[0].Product = "" },
			wants: []string{"GPU " + h100[0].UUID + `: the inventory has no product (nvidia-smi says "NVIDIA H100 80GB HBM3")`}},
		{what: "memory more than 1% apart", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) { st.GPUs[6].MemoryMiB = 95830 },
			wants: []string{"GPU " + h100[6].UUID + ": nvidia-smi says 81559 MiB, the inventory 95830 MiB (more than 1% apart)"}},
		{what: "memory just over 1% apart", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) { st.GPUs[6].MemoryMiB = 81559 - 825 },
			wants: []string{"GPU " + h100[6].UUID + ": nvidia-smi says 81559 MiB, the inventory 80734 MiB (more than 1% apart)"}},
		{what: "no memory in the inventory", seen: h100, edit: func(st *gpulabv1alpha1.GPUInventoryStatus) { st.GPUs[6].MemoryMiB = 0 },
			wants: []string{"GPU " + h100[6].UUID + ": the inventory has no memory (nvidia-smi says 81559 MiB)"}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			if tc.node == nil {
				tc.node = tc.seen
			}
			inv := inventoryOf(tc.node)
			if tc.edit != nil {
				tc.edit(&inv)
			}
			got := CompareWithInventory(tc.seen, inv)
			if strings.Join(got, "\n") != strings.Join(tc.wants, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.wants, "\n  "))
			}
		})
	}

	// memory.total [N/A] is never taken as agreeing.
	na := sample(t, "h100-sxm-memory-na.csv")
	inv := inventoryOf(na)
	inv.GPUs[1].MemoryMiB = 81559
	want := "GPU " + na[1].UUID + ": nvidia-smi could not read its memory (the inventory says 81559 MiB)"
	if got := CompareWithInventory(na, inv); len(got) != 1 || got[0] != want {
		t.Errorf("memory [N/A]: got %q, want [%q]", got, want)
	}
	// Nor an unreadable name.
	noName := append([]SMIGPU(nil), h100...)
	noName[4].Name = ""
	want = "GPU " + h100[4].UUID + `: nvidia-smi could not read its name (the inventory says "NVIDIA H100 80GB HBM3")`
	if got := CompareWithInventory(noName, inventoryOf(h100)); len(got) != 1 || got[0] != want {
		t.Errorf("name [N/A]: got %q, want [%q]", got, want)
	}
}

func TestProductKey(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":    "NVIDIA-H100-80GB-HBM3",
		"NVIDIA-H100-80GB-HBM3":    "NVIDIA-H100-80GB-HBM3",
		"NVIDIA A100-SXM4-80GB":    "NVIDIA-A100-SXM4-80GB",
		" NVIDIA H200 ":            "NVIDIA-H200",
		"NVIDIA GeForce RTX 4090":  "NVIDIA-GeForce-RTX-4090",
		"Tesla V100-SXM2-16GB (x)": "Tesla-V100-SXM2-16GB--x",
	} {
		if got := productKey(in); got != want {
			t.Errorf("productKey(%q) = %q, want %q", in, got, want)
		}
	}
	if productKey("NVIDIA H100 80GB HBM3") == productKey("NVIDIA H100 PCIe") {
		t.Error("different products compare equal")
	}
}

func TestCheckSubset(t *testing.T) {
	node := inventoryOf(sample(t, "h100-sxm-8.csv"))
	two := sample(t, "h100-sxm-2of8-noheader-nounits.csv")
	if got := CheckSubset(two, 2, node); len(got) != 0 {
		t.Errorf("the node's 5 and 2 for a request of 2: %q", got)
	}
	if got := CheckSubset(two[:1], 1, node); len(got) != 0 {
		t.Errorf("one of the node's for a request of 1: %q", got)
	}
	want := "nvidia-smi sees 2 GPUs, the pod requested 1"
	if got := CheckSubset(two, 1, node); len(got) != 1 || got[0] != want {
		t.Errorf("2 GPUs seen for 1 requested: got %q, want [%q]", got, want)
	}
	if got := CheckSubset(nil, 1, node); len(got) != 1 || got[0] != "nvidia-smi sees 0 GPUs, the pod requested 1" {
		t.Errorf("none seen for 1 requested: got %q", got)
	}
	other := inventoryOf(sample(t, "h200-sxm-8.csv"))
	got := CheckSubset(two, 2, other)
	if len(got) != 2 || got[0] != "nvidia-smi sees GPU "+two[0].UUID+" (index 0), which is not one of the node's 8" || !strings.Contains(got[1], two[1].UUID) {
		t.Errorf("another node's GPUs: got %q", got)
	}
}

func TestCheckClaimed(t *testing.T) {
	h100 := sample(t, "h100-sxm-8.csv")
	uuids := func(gs []SMIGPU) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.UUID)
		}
		return out
	}
	if got := CheckClaimed(h100[2:4], uuids(h100[2:4])); len(got) != 0 {
		t.Errorf("exactly the claim's 2: %q", got)
	}
	// The container sees one of the claim's and one it was not allocated:
	// the count agrees, the devices do not.
	got := CheckClaimed([]SMIGPU{h100[2], h100[5]}, uuids(h100[2:4]))
	want := []string{
		"nvidia-smi sees GPU " + h100[5].UUID + " (index 5), which the claim was not allocated",
		"the claim was allocated GPU " + h100[3].UUID + ", which nvidia-smi does not see",
	}
	if !slices.Equal(got, want) {
		t.Errorf("another GPU than allocated: got %q, want %q", got, want)
	}
	if got := CheckClaimed(h100, uuids(h100[:1])); len(got) != 8 || got[0] != "nvidia-smi sees 8 GPUs, the claim was allocated 1" {
		t.Errorf("every GPU of the node for a claim of 1: got %q", got)
	}
}

func TestDisjoint(t *testing.T) {
	h100 := sample(t, "h100-sxm-8.csv")
	if got := Disjoint(h100[:4], h100[4:]); len(got) != 0 {
		t.Errorf("halves: %q", got)
	}
	want := "GPU " + h100[4].UUID + " is seen by both pods"
	if got := Disjoint(h100[:5], h100[4:]); len(got) != 1 || got[0] != want {
		t.Errorf("halves sharing GPU 4: got %q, want [%q]", got, want)
	}
	// By UUID, not index: the 2-GPU pod's index 1 is the node's GPU 2.
	two := sample(t, "h100-sxm-2of8-noheader-nounits.csv")
	if got := Disjoint(two, h100[2:3]); len(got) != 1 || !strings.Contains(got[0], h100[2].UUID) {
		t.Errorf("sharing the node's GPU 2: got %q", got)
	}
	if got := Disjoint(two, h100[:2]); len(got) != 0 {
		t.Errorf("the node's 0 and 1 against its 5 and 2: %q", got)
	}
}

// The h200-device samples were captured on one real H200, beside the
// agent's inventory read there over real NVML: every form of the query
// parses to the same GPU, and the suite's comparison finds the two agree.
func TestRealH200Capture(t *testing.T) {
	var want []SMIGPU
	for _, name := range []string{"query.csv", "query-noheader.csv", "query-noheader-nounits.csv"} {
		gpus := sample(t, filepath.Join("h200-device", name))
		if want == nil {
			want = gpus
		}
		if len(gpus) != 1 || gpus[0] != want[0] || gpus[0].Name != "NVIDIA H200" || gpus[0].MemoryMiB != 143771 {
			t.Errorf("%s parsed as %+v, want the one H200 of query.csv (%+v)", name, gpus, want)
		}
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "nvidia-smi", "h200-device", "agent-inventory.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inv gpulabv1alpha1.GPUInventory
	if err := json.Unmarshal(raw, &inv); err != nil {
		t.Fatal(err)
	}
	if got := CompareWithInventory(want, inv.Status); len(got) != 0 {
		t.Errorf("the agent's real inventory and nvidia-smi disagree: %q", got)
	}
}
