package podresources_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpulab/gpulab/node-agent/internal/podresources"
)

// kubelet serves the kubelet's side of the pod-resources API.
type kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	pods []*podresourcesv1.PodResources
}

func (k *kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// serve starts a gRPC server for k on a unix socket at path until the
// returned function is called.
func serve(t *testing.T, path string, k *kubelet) func() {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// A kubelet that dies leaves its socket behind.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, k)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	var once sync.Once
	stop := func() { once.Do(func() { srv.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// socketDir is a short temporary directory: unix socket paths are limited
// to about 100 bytes.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func gpus(resource string, ids ...string) *podresourcesv1.ContainerDevices {
	return &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

// logLines collects what a Source logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+args)
}

func (l *logLines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func TestOwners(t *testing.T) {
	socket := filepath.Join(socketDir(t), "kubelet.sock")
	var logs logLines
	src, err := podresources.New(podresources.Options{Socket: socket, Log: funcr.New(logs.add, funcr.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	ctx := context.Background()

	// No socket: no attribution, said once however often it is scraped.
	for range 3 {
		if got := src.Owners(ctx); got != nil {
			t.Fatalf("without a socket: %v", got)
		}
	}
	if l := logs.get(); len(l) != 1 || !strings.Contains(l[0], "pod attribution off") || !strings.Contains(l[0], socket) {
		t.Fatalf("log without a socket: %q, want one line saying attribution is off", l)
	}

	k := &kubelet{pods: []*podresourcesv1.PodResources{
		{Name: "train-0", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{gpus("nvidia.com/gpu", "GPU-a", "GPU-b"), gpus("example.com/fpga", "fpga-0")}},
			{Name: "sidecar"},
		}},
		{Name: "infer-1", Namespace: "serving", Containers: []*podresourcesv1.ContainerResources{
			{Name: "server", Devices: []*podresourcesv1.ContainerDevices{gpus("nvidia.com/gpu", "GPU-c")}},
		}},
		// Two pods on replicas of one time-sliced GPU.
		{Name: "shared-b", Namespace: "dev", Containers: []*podresourcesv1.ContainerResources{
			{Name: "nb", Devices: []*podresourcesv1.ContainerDevices{gpus("nvidia.com/gpu.shared", "GPU-d::3")}},
		}},
		{Name: "shared-a", Namespace: "dev", Containers: []*podresourcesv1.ContainerResources{
			{Name: "nb", Devices: []*podresourcesv1.ContainerDevices{gpus("nvidia.com/gpu.shared", "GPU-d::1")}},
		}},
	}}
	stop := serve(t, socket, k)
	want := map[string]podresources.Owner{
		"GPU-a": {Pod: "train-0", Namespace: "ml", Container: "trainer"},
		"GPU-b": {Pod: "train-0", Namespace: "ml", Container: "trainer"},
		"GPU-c": {Pod: "infer-1", Namespace: "serving", Container: "server"},
		"GPU-d": {Pod: "shared-a", Namespace: "dev", Container: "nb"},
	}
	for range 2 {
		if got := src.Owners(ctx); !reflect.DeepEqual(got, want) {
			t.Fatalf("owners: got %v, want %v", got, want)
		}
	}
	if l := logs.get(); len(l) != 2 || !strings.Contains(l[1], "pod attribution on") {
		t.Fatalf("log once the socket serves: %q", l)
	}

	// The kubelet stops answering but leaves its socket: no stale answer.
	stop()
	if got := src.Owners(ctx); got != nil {
		t.Errorf("with the kubelet gone: %v", got)
	}
	if got := src.Owners(ctx); got != nil {
		t.Errorf("with the kubelet gone: %v", got)
	}
	if l := logs.get(); len(l) != 3 || !strings.Contains(l[2], "pod attribution failing") {
		t.Errorf("log once the kubelet is gone: %q", l)
	}
}

func TestListNamesTheMissingSocket(t *testing.T) {
	socket := filepath.Join(socketDir(t), "absent.sock")
	src, err := podresources.New(podresources.Options{Socket: socket})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	if _, err := src.List(context.Background()); err == nil || !strings.Contains(err.Error(), socket) {
		t.Errorf("List without a socket: %v", err)
	}
}
