package mock_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/node-agent/internal/labels"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/testbeds/local"
)

func open(t testing.TB, profile, node string) (*mock.Backend, *nvml.Snapshot) {
	t.Helper()
	b, err := mock.New(profile, node, nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown() })
	s, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

// real is what a real node of each kind reports (nvidia-smi / NVML).
var realNodes = map[string]struct {
	name         string
	memMiB       int64
	cc           string
	arch         string
	pciID        uint32
	busID0       string
	fabric       bool
	machine      string
	computeMajor int
}{
	"dgx-a100": {"NVIDIA A100-SXM4-40GB", 40960, "8.0", "ampere", 0x20B010DE, "00000000:07:00.0", false, "DGXA100-920-23687-2530-000", 8},
	"dgx-h100": {"NVIDIA H100 80GB HBM3", 81559, "9.0", "hopper", 0x233010DE, "00000000:18:00.0", true, "DGXH100", 9},
	"dgx-h200": {"NVIDIA H200", 143771, "9.0", "hopper", 0x233510DE, "00000000:18:00.0", true, "DGXH200", 9},
	"dgx-b200": {"NVIDIA B200", 183359, "10.0", "blackwell", 0x290110DE, "00000000:18:00.0", true, "DGXB200", 10},
}

func TestProfilesReportRealValues(t *testing.T) {
	if got, want := mock.ProfileNames(), []string{"dgx-a100", "dgx-b200", "dgx-h100", "dgx-h200"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("profiles: got %v, want %v", got, want)
	}
	for _, name := range mock.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			want := realNodes[name]
			_, s := open(t, name, "node-"+name)
			if s.DriverVersion != "570.172.08" || s.CUDADriverVersion() != "12.8" || s.NVMLVersion != "12.570.172.08" {
				t.Errorf("versions: driver %q cuda %q nvml %q", s.DriverVersion, s.CUDADriverVersion(), s.NVMLVersion)
			}
			if s.Machine != want.machine {
				t.Errorf("machine: got %q, want %q", s.Machine, want.machine)
			}
			if len(s.Devices) != 8 {
				t.Fatalf("GPUs: got %d, want 8", len(s.Devices))
			}
			seen := map[string]bool{}
			for i, d := range s.Devices {
				cc := ""
				if d.ComputeMajor > 0 {
					cc = strings.Join([]string{itoa(d.ComputeMajor), itoa(d.ComputeMinor)}, ".")
				}
				if d.Index != i || d.Minor != i || d.Name != want.name || d.MemoryMiB() != want.memMiB || cc != want.cc ||
					d.Architecture != want.arch || d.PCIDeviceID != want.pciID {
					t.Errorf("GPU %d: got index %d minor %d %q %d MiB cc %s %s %#x", i, d.Index, d.Minor, d.Name, d.MemoryMiB(), cc, d.Architecture, d.PCIDeviceID)
				}
				if len(d.Errors) > 0 || d.Lost {
					t.Errorf("GPU %d: errors %v lost %v", i, d.Errors, d.Lost)
				}
				if !strings.HasPrefix(d.UUID, "GPU-") || len(d.UUID) != 40 || seen[d.UUID] {
					t.Errorf("GPU %d: UUID %q malformed or repeated", i, d.UUID)
				}
				seen[d.UUID] = true
				if d.MIG == nil || d.MIG.Current || d.MIG.Pending {
					t.Errorf("GPU %d: want MIG capable and disabled, got %+v", i, d.MIG)
				}
				if want.fabric != (d.Fabric != nil) || (d.Fabric != nil && (d.Fabric.State != nvml.FabricCompleted || d.Fabric.Status != "Success")) {
					t.Errorf("GPU %d: fabric %+v (want reported: %v)", i, d.Fabric, want.fabric)
				}
				if !d.RemappedRows.Known || d.RemappedRows.Failure {
					t.Errorf("GPU %d: remapped rows %+v", i, d.RemappedRows)
				}
				tel := d.Telemetry
				if !tel.PowerWatts.OK || !tel.TemperatureCelsius.OK || !tel.GPUUtilization.OK || !tel.MemoryUsedBytes.OK || !tel.ECCUncorrectedVolatile.OK ||
					!tel.SMClockMHz.OK || tel.SMClockMHz.Value == 0 || !tel.MemoryFreeBytes.OK {
					t.Errorf("GPU %d: telemetry incomplete: %+v", i, tel)
				}
				if free := uint64(tel.MemoryFreeBytes.Value); free != d.MemoryTotalBytes-uint64(tel.MemoryUsedBytes.Value) {
					t.Errorf("GPU %d: free %d bytes, want total - used", i, free)
				}
				// Two sockets, half the GPUs on each.
				if want := i / 4; d.NUMANode != want {
					t.Errorf("GPU %d: NUMA node %d, want %d", i, d.NUMANode, want)
				}
			}
			if s.Devices[0].PCIBusID != want.busID0 {
				t.Errorf("bus id of GPU 0: got %q, want %q", s.Devices[0].PCIBusID, want.busID0)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestProfilesAgreeWithTestbed checks the mock against the fake nodes the
// local testbed creates: the agent on a fake node must publish what the node
// already claims.
func TestProfilesAgreeWithTestbed(t *testing.T) {
	if len(local.Profiles) != len(mock.Profiles) {
		t.Errorf("testbed has %d profiles, mock %d", len(local.Profiles), len(mock.Profiles))
	}
	for name, tp := range local.Profiles {
		t.Run(name, func(t *testing.T) {
			if _, ok := mock.Profiles[name]; !ok {
				t.Fatalf("no mock profile %q", name)
			}
			node := "fake-" + name
			_, s := open(t, name, node)
			got := labels.ForNode(s)
			want := tp.Labels(node)
			for k, v := range got {
				if want[k] != v {
					t.Errorf("label %s: agent %q, testbed %q", k, v, want[k])
				}
			}
			for _, k := range []string{gfd.Product, gfd.Count, gfd.Memory, gfd.Family, gfd.ComputeMajor,
				gfd.ComputeMinor, gfd.Machine, gfd.DriverVersionFull, gfd.RuntimeVersionFull, gfd.MIGCapable} {
				if _, ok := got[k]; !ok {
					t.Errorf("agent does not set %s", k)
				}
			}
			if len(s.Devices) != tp.GPUs || s.Devices[0].MemoryMiB() != tp.MemoryMiB || s.Machine != tp.Machine {
				t.Errorf("shape: %d GPUs of %d MiB on %q; testbed %d of %d on %q", len(s.Devices), s.Devices[0].MemoryMiB(), s.Machine, tp.GPUs, tp.MemoryMiB, tp.Machine)
			}
		})
	}
}

func TestStableUUIDs(t *testing.T) {
	_, a := open(t, "dgx-h100", "node-a")
	_, again := open(t, "dgx-h100", "node-a")
	_, other := open(t, "dgx-h100", "node-b")
	for i := range a.Devices {
		if a.Devices[i].UUID != again.Devices[i].UUID {
			t.Errorf("GPU %d: UUID changed between runs: %s, %s", i, a.Devices[i].UUID, again.Devices[i].UUID)
		}
		if a.Devices[i].UUID == other.Devices[i].UUID {
			t.Errorf("GPU %d: two nodes share UUID %s", i, a.Devices[i].UUID)
		}
	}
}

func TestFaults(t *testing.T) {
	b, _ := open(t, "dgx-h100", "n")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.FailQuery(1, "name", gonvml.ERROR_UNKNOWN))
	must(b.FailQuery(1, "power", gonvml.ERROR_NOT_SUPPORTED))
	must(b.SetRemappedRows(2, nvml.RemappedRows{Uncorrectable: 3, Failure: true}))
	must(b.SetFabric(3, "InProgress", gonvml.SUCCESS))
	must(b.SetMIG(4, true, mock.MIGInstance{GPUSlices: 1, ComputeSlices: 1, MemoryMiB: 9856}, mock.MIGInstance{GPUSlices: 3, ComputeSlices: 3, MemoryMiB: 40192}))
	must(b.SetLost(5))
	if err := b.FailQuery(8, "name", gonvml.ERROR_UNKNOWN); err == nil {
		t.Error("FailQuery on a GPU the machine does not have must fail")
	}
	s, err := b.Snapshot()
	must(err)
	d := s.Devices
	if d[1].Name != "" || !reflect.DeepEqual(d[1].Errors, []string{"name: ERROR_UNKNOWN"}) || d[1].UUID == "" || d[1].Telemetry.PowerWatts.OK {
		t.Errorf("GPU 1: name %q errors %v power %+v", d[1].Name, d[1].Errors, d[1].Telemetry.PowerWatts)
	}
	if r := d[2].RemappedRows; !r.Failure || r.Uncorrectable != 3 {
		t.Errorf("GPU 2: remapped rows %+v", r)
	}
	if d[3].Fabric == nil || d[3].Fabric.State != nvml.FabricInProgress || d[3].Fabric.Complete() {
		t.Errorf("GPU 3: fabric %+v", d[3].Fabric)
	}
	m := d[4].MIG
	if m == nil || !m.Current || len(m.Devices) != 2 || m.Devices[0].Profile != "1g.10gb" || m.Devices[1].Profile != "3g.40gb" ||
		!strings.HasPrefix(m.Devices[0].UUID, "MIG-") || d[4].Telemetry.GPUUtilization.OK {
		t.Errorf("GPU 4: MIG %+v, utilization %+v", m, d[4].Telemetry.GPUUtilization)
	}
	if !d[5].Lost || d[5].UUID != "" || len(d[5].Errors) != 1 {
		t.Errorf("GPU 5: lost %v UUID %q errors %v", d[5].Lost, d[5].UUID, d[5].Errors)
	}
	for _, i := range []int{0, 6, 7} {
		if len(d[i].Errors) != 0 || d[i].Lost {
			t.Errorf("GPU %d was not touched but reports %v", i, d[i].Errors)
		}
	}
}

func TestEvents(t *testing.T) {
	b, _ := open(t, "dgx-b200", "n")
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan nvml.Event, 8)
	done := make(chan error, 1)
	go func() { done <- b.Watch(ctx, events) }()
	next := func() nvml.Event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
		return nvml.Event{}
	}
	if err := b.InjectXID(3, 79); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.Kind != nvml.EventXID || e.XID != 79 || e.UUID != b.UUID(3) {
		t.Errorf("got %+v, want XID 79 on GPU 3 (%s)", e, b.UUID(3))
	}
	if err := b.InjectECC(6, true); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.Kind != nvml.EventDoubleBitECC || e.UUID != b.UUID(6) {
		t.Errorf("got %+v, want a double-bit ECC error on GPU 6", e)
	}
	if err := b.SetLost(2); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.Kind != nvml.EventGPULost {
		t.Errorf("got %+v, want GPU lost", e)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after cancellation")
	}
}
