package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/cdispec"
	"github.com/gpulab/gpulab/node-agent/internal/deviceplugin"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// fakeKubelet serves the kubelet's two node-local gRPC APIs the agent uses:
// device-plugin Registration and pod-resources List.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	podresourcesv1.UnimplementedPodResourcesListerServer
	regs chan *pluginapi.RegisterRequest

	mu   sync.Mutex
	pods []*podresourcesv1.PodResources
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- r
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func serveUnix(t *testing.T, path string, register func(*grpc.Server)) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
}

// kubeconfigFor writes a kubeconfig for cfg.
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func poll(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDevicePluginMode runs the agent as a DaemonSet would in device-plugin
// mode, on a mock DGX H100, against a real API server and the kubelet's
// gRPC protocols: it registers nvidia.com/gpu, streams the mock's eight
// UUIDs, hands out exactly the GPUs asked, publishes its GPUInventory but
// leaves the node's capacity to the kubelet, and attributes a GPU to the pod
// the pod-resources API names on its DCGM series.
func TestDevicePluginMode(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{
		CRDDirs: []string{filepath.Join("..", "..", "..", "operator", "config", "crd", "bases", "gpulab.io_gpuinventories.yaml")},
	})
	ctx := context.Background()
	const node = "gpu-node-1"
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir, err := os.MkdirTemp("", "dpmode")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pluginDir := filepath.Join(dir, "device-plugins")
	if err := os.Mkdir(pluginDir, 0o750); err != nil {
		t.Fatal(err)
	}
	ref, err := mock.New("dgx-h100", node, nvml.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for i := range ref.Profile().GPUs() {
		uuids = append(uuids, ref.UUID(i))
	}
	k := &fakeKubelet{regs: make(chan *pluginapi.RegisterRequest, 4), pods: []*podresourcesv1.PodResources{{
		Name: "train-0", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{{
			Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{uuids[2]}}},
		}},
	}}}
	serveUnix(t, filepath.Join(pluginDir, "kubelet.sock"), func(s *grpc.Server) { pluginapi.RegisterRegistrationServer(s, k) })
	podSocket := filepath.Join(dir, "pod-resources.sock")
	serveUnix(t, podSocket, func(s *grpc.Server) { podresourcesv1.RegisterPodResourcesListerServer(s, k) })

	metricsAddr := freeAddr(t)
	runCtx, cancel := context.WithCancel(ctx)
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- Main(runCtx, []string{"--node-name=" + node, "--nvml=mock:dgx-h100", "--kubeconfig=" + kubeconfigFor(t, env.Config),
			"--device-plugin", "--device-plugin-dir=" + pluginDir, "--pod-resources-socket=" + podSocket,
			"--metrics-bind-address=" + metricsAddr, "--label-node=false"}, io.Discard, &stderr)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-exited:
			if code != ExitOK {
				t.Errorf("exit %d; stderr:\n%s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop within 30s")
		}
	}
	t.Cleanup(stop)

	var reg *pluginapi.RegisterRequest
	select {
	case reg = <-k.regs:
	case code := <-exited:
		t.Fatalf("the agent exited %d before registering; stderr:\n%s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no registration within 30s; stderr:\n%s", stderr.String())
	}
	if reg.GetResourceName() != "nvidia.com/gpu" || reg.GetVersion() != pluginapi.Version {
		t.Errorf("registration: %+v", reg)
	}

	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, reg.GetEndpoint()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	dp := pluginapi.NewDevicePluginClient(conn)
	streamCtx, stopStream := context.WithTimeout(ctx, 60*time.Second)
	defer stopStream()
	stream, err := dp.ListAndWatch(streamCtx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	// The first answer may precede the first scan (no devices yet).
	var ids []string
	for len(ids) == 0 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		ids = nil
		for _, d := range r.GetDevices() {
			ids = append(ids, d.GetID())
			if d.GetHealth() != pluginapi.Healthy {
				t.Errorf("device %s is %s", d.GetID(), d.GetHealth())
			}
		}
	}
	if !slices.Equal(ids, uuids) {
		t.Fatalf("ListAndWatch: %v, want the mock's UUIDs %v", ids, uuids)
	}

	resp, err := dp.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids[4:8]}}})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(resp.GetContainerResponses()[0].GetEnvs()["NVIDIA_VISIBLE_DEVICES"], ",")
	if !slices.Equal(got, uuids[4:8]) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES for 4 GPUs: %v, want %v", got, uuids[4:8])
	}

	// The inventory is published; the capacity is not the agent's to set.
	poll(t, "the GPUInventory", func() bool {
		var inv v1alpha1.GPUInventory
		return env.Client.Get(ctx, client.ObjectKey{Name: node}, &inv) == nil && inv.Status.Summary.Count == 8
	})
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := n.Status.Capacity["nvidia.com/gpu"]; ok {
		t.Errorf("the agent set nvidia.com/gpu capacity %s in device-plugin mode", q.String())
	}

	// DCGM series carry the pod holding GPU 2, and empty labels elsewhere.
	var body string
	poll(t, "DCGM series on /metrics", func() bool {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "DCGM_FI_DEV_GPU_UTIL{")
	})
	for _, want := range []string{
		`DCGM_FI_DEV_GPU_UTIL{DCGM_FI_DRIVER_VERSION="570.172.08",Hostname="gpu-node-1",UUID="` + uuids[2] +
			`",container="trainer",device="nvidia2",gpu="2",modelName="NVIDIA H100 80GB HBM3",namespace="ml",pci_bus_id="00000000:3A:00.0",pod="train-0"} 0`,
		`DCGM_FI_DEV_FB_FREE{DCGM_FI_DRIVER_VERSION="570.172.08",Hostname="gpu-node-1",UUID="` + uuids[0] +
			`",container="",device="nvidia0",gpu="0",modelName="NVIDIA H100 80GB HBM3",namespace="",pci_bus_id="00000000:18:00.0",pod=""} 81559`,
		`gpulab_gpu_utilization_ratio{UUID="` + uuids[2] + `"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	stop()
	if _, err := os.Stat(filepath.Join(pluginDir, reg.GetEndpoint())); !os.IsNotExist(err) {
		t.Errorf("the plugin's socket outlives the agent: %v", err)
	}
}

// TestPluginDevicesFollowHealth: the devices the plugin serves follow the
// agent's health checks: a critical XID on GPU 5 makes exactly it Unhealthy.
func TestPluginDevicesFollowHealth(t *testing.T) {
	b, err := mock.New("dgx-h100", "gpu-node-1", nvml.Options{EventWaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	scans := make(chan []deviceplugin.Device, 16)
	a, err := agent.New(b, agent.Options{NodeName: "gpu-node-1", Interval: time.Hour, OnScanned: func(r *agent.Result) {
		scans <- pluginDevices(r)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer runAgent(t, a)()
	next := func() []deviceplugin.Device {
		t.Helper()
		select {
		case d := <-scans:
			return d
		case <-time.After(30 * time.Second):
			t.Fatal("no scan within 30s")
		}
		return nil
	}
	first := next()
	if len(first) != 8 {
		t.Fatalf("first scan: %d devices", len(first))
	}
	for i, d := range first {
		if d.ID != b.UUID(i) || !d.Healthy || d.NUMANode != i/4 {
			t.Errorf("device %d: %+v, want %s healthy on NUMA node %d", i, d, b.UUID(i), i/4)
		}
	}
	if err := b.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	after := next()
	for i, d := range after {
		if d.Healthy == (i == 5) {
			t.Errorf("after XID 79 on GPU 5: device %d healthy = %v", i, d.Healthy)
		}
	}
}

// nopPublisher publishes nothing and counts the publishes.
type nopPublisher struct {
	mu        sync.Mutex
	published int
}

func (p *nopPublisher) Load(context.Context, string) (*v1alpha1.GPUInventoryStatus, error) {
	return nil, nil
}

func (p *nopPublisher) Publish(context.Context, string, publisher.State) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published++
	return nil
}

func (p *nopPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published
}

func (p *nopPublisher) WatchClearHealth(ctx context.Context, _ string, _ func(string)) error {
	<-ctx.Done()
	return nil
}

func (p *nopPublisher) ClearHealthDone(context.Context, string, string) error { return nil }

// TestPluginDevicesUnhealthyAfterFailedScans: once three scans in a row
// failed, the kubelet is told every GPU is Unhealthy (still on its NUMA
// node); a good scan makes them Healthy again.
func TestPluginDevicesUnhealthyAfterFailedScans(t *testing.T) {
	b, err := mock.New("dgx-h100", "gpu-node-1", nvml.Options{EventWaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := deviceplugin.New(deviceplugin.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pub := &nopPublisher{}
	a, err := agent.New(b, agent.Options{NodeName: "gpu-node-1", Interval: time.Hour, Publisher: pub, OnScanned: func(r *agent.Result) {
		plugin.SetDevices(pluginDevices(r))
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer runAgent(t, a)()
	poll(t, "the first publish", func() bool { return pub.count() == 1 })
	check := func(when string, healthy bool) {
		t.Helper()
		devs := plugin.Devices()
		if len(devs) != 8 {
			t.Fatalf("%s: %d devices, want 8", when, len(devs))
		}
		for i, d := range devs {
			if d.ID != b.UUID(i) || d.Healthy != healthy || d.NUMANode != i/4 {
				t.Errorf("%s: device %d %+v, want %s healthy=%v on NUMA node %d", when, i, d, b.UUID(i), healthy, i/4)
			}
		}
	}
	check("first scan", true)

	b.FailDeviceCount(gonvml.ERROR_UNKNOWN)
	for n := 1; n <= 3; n++ {
		a.Rescan()
		poll(t, "the publish of a failed scan", func() bool { return pub.count() == 1+n })
	}
	check("after 3 failed scans", false)

	b.FailDeviceCount(gonvml.SUCCESS)
	a.Rescan()
	poll(t, "the publish of a good scan", func() bool { return pub.count() == 5 })
	check("after a good scan", true)
}

// TestCDISpecWrittenBeforeGPUsAreServed: with --cdi-spec-dir, a scan's GPUs
// reach the plugin only after their spec is in the folder; where it cannot
// be written, every GPU is served Unhealthy, so the kubelet never hands out
// a CDI name the runtime cannot resolve.
func TestCDISpecWrittenBeforeGPUsAreServed(t *testing.T) {
	r := scanOnce(t)
	plugin, err := deviceplugin.New(deviceplugin.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := cdispec.NewWriter(dir, deviceplugin.DefaultCDIKind)
	if err != nil {
		t.Fatal(err)
	}
	servePlugin(plugin, w, r, logr.Discard())
	data, err := os.ReadFile(filepath.Join(dir, cdispec.FileName))
	if err != nil {
		t.Fatalf("no spec after the GPUs were served: %v", err)
	}
	for _, d := range plugin.Devices() {
		if !d.Healthy || !bytes.Contains(data, []byte(`"name":"`+d.ID+`"`)) {
			t.Errorf("device %+v: want Healthy and named in the spec %s", d, data)
		}
	}

	// A folder that cannot be written: a file stands where it should be.
	blocked := filepath.Join(t.TempDir(), "cdi")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if w, err = cdispec.NewWriter(blocked, deviceplugin.DefaultCDIKind); err != nil {
		t.Fatal(err)
	}
	servePlugin(plugin, w, r, logr.Discard())
	for _, d := range plugin.Devices() {
		if d.Healthy {
			t.Errorf("device %s served Healthy without a CDI spec", d.ID)
		}
	}
}

// scanOnce is the first scan of a mock dgx-h100 agent.
func scanOnce(t *testing.T) *agent.Result {
	t.Helper()
	b, err := mock.New("dgx-h100", "gpu-node-1", nvml.Options{EventWaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	scans := make(chan *agent.Result, 1)
	a, err := agent.New(b, agent.Options{NodeName: "gpu-node-1", Interval: time.Hour, Publisher: &nopPublisher{}, OnScanned: func(r *agent.Result) {
		select {
		case scans <- r:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer runAgent(t, a)()
	select {
	case r := <-scans:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no scan within 30s")
	}
	return nil
}

// runAgent runs a until the returned function stops it, reporting its error.
func runAgent(t *testing.T, a *agent.Agent) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
