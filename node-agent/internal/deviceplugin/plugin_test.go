package deviceplugin_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpulab/gpulab/node-agent/internal/deviceplugin"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
)

// kubelet is the kubelet's side of registration: it serves Registration on
// kubelet.sock and, as the kubelet does, dials the endpoint it is given
// before accepting.
type kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir  string
	regs chan *pluginapi.RegisterRequest
	srv  *grpc.Server
	done chan struct{}
}

func (k *kubelet) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	conn := dial(k.dir, req.GetEndpoint())
	defer func() { _ = conn.Close() }()
	if _, err := pluginapi.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "dialing the plugin back: %v", err)
	}
	k.regs <- req
	return &pluginapi.Empty{}, nil
}

// startKubelet serves Registration on dir/kubelet.sock.
func startKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{dir: dir, regs: make(chan *pluginapi.RegisterRequest, 8), srv: grpc.NewServer(), done: make(chan struct{})}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { defer close(k.done); _ = k.srv.Serve(ln) }()
	t.Cleanup(k.stop)
	return k
}

func (k *kubelet) stop() {
	k.srv.Stop()
	<-k.done
}

// registration waits for the next registration.
func (k *kubelet) registration(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.regs:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no registration within 20s")
	}
	return nil
}

func dial(dir, socket string) *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, socket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err) // only for a malformed target
	}
	return conn
}

// socketDir is a short temporary directory: unix socket paths are limited
// to about 100 bytes.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// mockDevices are the GPUs of a mock machine, as the agent feeds them.
func mockDevices(t *testing.T, profile string) []deviceplugin.Device {
	t.Helper()
	b, err := mock.New(profile, "gpu-node-1", nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Init(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Shutdown() }()
	s, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var devs []deviceplugin.Device
	for _, d := range s.Devices {
		devs = append(devs, deviceplugin.Device{ID: d.UUID, Healthy: true, NUMANode: d.NUMANode})
	}
	return devs
}

// start runs a plugin serving devs in dir until the test ends.
func start(t *testing.T, dir string, devs []deviceplugin.Device) *deviceplugin.Plugin {
	t.Helper()
	p, err := deviceplugin.New(deviceplugin.Options{Dir: dir, CheckInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.SetDevices(devs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, err := os.Stat(p.Socket()); !os.IsNotExist(err) {
			t.Errorf("the plugin's socket is left behind: %v", err)
		}
	})
	return p
}

func TestRegisterListAndAllocate(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	devs := mockDevices(t, "dgx-h100")
	p := start(t, dir, devs)

	reg := k.registration(t)
	if reg.GetVersion() != pluginapi.Version || reg.GetResourceName() != "nvidia.com/gpu" || reg.GetEndpoint() != "gpulab-gpu.sock" ||
		!reg.GetOptions().GetGetPreferredAllocationAvailable() || reg.GetOptions().GetPreStartRequired() {
		t.Errorf("registration: %+v", reg)
	}

	conn := dial(dir, reg.GetEndpoint())
	defer func() { _ = conn.Close() }()
	c := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, d := range first.GetDevices() {
		ids = append(ids, d.GetID())
		nodes := d.GetTopology().GetNodes()
		if d.GetHealth() != pluginapi.Healthy || len(nodes) != 1 || nodes[0].GetID() != int64(i/4) {
			t.Errorf("device %d: %+v, want Healthy on NUMA node %d", i, d, i/4)
		}
	}
	var want []string
	for _, d := range devs {
		want = append(want, d.ID)
	}
	if !slices.Equal(ids, want) || len(ids) != 8 {
		t.Fatalf("ListAndWatch: %v, want the mock's 8 UUIDs %v", ids, want)
	}
	unique := slices.Clone(ids)
	slices.Sort(unique)
	if len(slices.Compact(unique)) != len(ids) {
		t.Errorf("device IDs repeat: %v", ids)
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, "GPU-") || len(id) > 63 {
			t.Errorf("device ID %q: want a GPU UUID, at most 63 characters", id)
		}
	}

	// A GPU the agent finds unhealthy is streamed Unhealthy.
	devs[5].Healthy = false
	p.SetDevices(devs)
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range next.GetDevices() {
		if want := map[bool]string{true: pluginapi.Unhealthy, false: pluginapi.Healthy}[i == 5]; d.GetHealth() != want {
			t.Errorf("after GPU 5 turned unhealthy: device %d is %s, want %s", i, d.GetHealth(), want)
		}
	}

	// Allocate: exactly the four asked, in NVIDIA_VISIBLE_DEVICES.
	four := []string{ids[6], ids[1], ids[2], ids[0]}
	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: four}, {DevicesIds: ids[3:4]},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetContainerResponses()); n != 2 {
		t.Fatalf("%d container responses, want 2", n)
	}
	got := strings.Split(resp.GetContainerResponses()[0].GetEnvs()["NVIDIA_VISIBLE_DEVICES"], ",")
	if !slices.Equal(got, four) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %v, want %v", got, four)
	}
	if got := resp.GetContainerResponses()[1].GetEnvs()["NVIDIA_VISIBLE_DEVICES"]; got != ids[3] {
		t.Errorf("second container: NVIDIA_VISIBLE_DEVICES = %q, want %q", got, ids[3])
	}

	for name, req := range map[string][]string{
		"an unknown ID":     {ids[0], "GPU-00000000-0000-0000-0000-000000000000"},
		"an ID asked twice": {ids[0], ids[0]},
		"no ID":             nil,
	} {
		_, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: req}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("Allocate with %s: %v, want InvalidArgument", name, err)
		}
	}

	// Preferred allocations stay on one NUMA node when they fit.
	for _, tc := range []struct {
		name            string
		available, must []string
		size            int
		want            []string
	}{
		{"four of eight", ids, nil, 4, ids[0:4]},
		{"the node it fits", []string{ids[0], ids[4], ids[5], ids[6]}, nil, 2, ids[4:6]},
		{"beside a must-include", ids, []string{ids[6]}, 3, []string{ids[6], ids[4], ids[5]}},
		{"more than a node", ids, nil, 6, []string{ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]}},
	} {
		resp, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: tc.available, MustIncludeDeviceIDs: tc.must, AllocationSize: int32(tc.size)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetContainerResponses()[0].GetDeviceIDs(); !slices.Equal(got, tc.want) {
			t.Errorf("preferred allocation, %s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReRegistersWhenTheKubeletRestarts: a restarting kubelet removes the
// plugin sockets and makes a new kubelet.sock; the plugin serves and
// registers again. Recreating kubelet.sock alone is enough too.
func TestReRegistersWhenTheKubeletRestarts(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	p := start(t, dir, mockDevices(t, "dgx-a100"))
	k.registration(t)

	restart := func(removePlugins bool) *kubelet {
		t.Helper()
		k.stop()
		if err := os.Remove(p.KubeletSocket()); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if removePlugins {
			if err := os.Remove(p.Socket()); err != nil {
				t.Fatal(err)
			}
		}
		return startKubelet(t, dir)
	}
	k = restart(true)
	k.registration(t)
	// The plugin serves its socket again.
	conn := dial(dir, "gpulab-gpu.sock")
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || len(r.GetDevices()) != 8 {
		t.Fatalf("ListAndWatch after the restart: %v, %d devices", err, len(r.GetDevices()))
	}

	k = restart(false)
	k.registration(t)
}

// TestWaitsForTheKubelet: started before the kubelet, the plugin registers
// once kubelet.sock appears.
func TestWaitsForTheKubelet(t *testing.T) {
	dir := socketDir(t)
	p := start(t, dir, mockDevices(t, "dgx-b200"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(p.Socket()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the plugin's socket did not appear")
		}
		time.Sleep(10 * time.Millisecond)
	}
	k := startKubelet(t, dir)
	if r := k.registration(t); r.GetResourceName() != "nvidia.com/gpu" {
		t.Errorf("registration: %+v", r)
	}
}

func TestOptionsRejectAPath(t *testing.T) {
	if _, err := deviceplugin.New(deviceplugin.Options{SocketName: "a/b.sock"}); err == nil {
		t.Error("a socket name with a slash is accepted")
	}
}

// TestSetDevicesKeepsNUMANode: a device of unknown NUMA node (from a failed
// scan) keeps the node it was served with; a new device stays unknown.
func TestSetDevicesKeepsNUMANode(t *testing.T) {
	p, err := deviceplugin.New(deviceplugin.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p.SetDevices([]deviceplugin.Device{{ID: "GPU-a", Healthy: true, NUMANode: 1}})
	p.SetDevices([]deviceplugin.Device{{ID: "GPU-a", NUMANode: -1}, {ID: "GPU-b", NUMANode: -1}})
	want := []deviceplugin.Device{{ID: "GPU-a", NUMANode: 1}, {ID: "GPU-b", NUMANode: -1}}
	if got := p.Devices(); !slices.Equal(got, want) {
		t.Errorf("devices %+v, want %+v", got, want)
	}
}
