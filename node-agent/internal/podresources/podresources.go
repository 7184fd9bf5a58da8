package podresources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// DefaultResourcePrefix selects the resources whose device IDs are GPUs:
// nvidia.com/gpu and the NVIDIA plugin's renamed or shared variants.
const DefaultResourcePrefix = "nvidia.com/"

// maxMessageSize bounds a List answer; a busy node's answer outgrows gRPC's
// 4 MiB default, so the kubelet's own client allows 16 MiB as well.
const maxMessageSize = 16 << 20

// ErrNoSocket means the kubelet's pod-resources socket does not exist.
var ErrNoSocket = errors.New("no kubelet pod-resources socket")

// Owner is the container a device is allocated to.
type Owner struct {
	Pod, Namespace, Container string
}

// Options configures a Source.
type Options struct {
	// Socket is the kubelet's pod-resources socket. Defaults to
	// DefaultSocket.
	Socket string
	// ResourcePrefix selects the resources whose devices are attributed.
	// Defaults to DefaultResourcePrefix.
	ResourcePrefix string
	// Timeout bounds one List call. Defaults to 2s.
	Timeout time.Duration
	// Log receives one line whenever attribution turns on, off or fails.
	// Defaults to logr.Discard().
	Log logr.Logger
}

// Source lists the kubelet's device allocations.
type Source struct {
	opts   Options
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient

	mu    sync.Mutex
	state string
}

// New returns a Source for the socket in opts. It does not connect: the
// socket may appear later, and every call looks again.
func New(opts Options) (*Source, error) {
	if opts.Socket == "" {
		opts.Socket = DefaultSocket
	}
	if opts.ResourcePrefix == "" {
		opts.ResourcePrefix = DefaultResourcePrefix
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	conn, err := grpc.NewClient("unix://"+opts.Socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("pod-resources client for %s: %w", opts.Socket, err)
	}
	return &Source{opts: opts, conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn)}, nil
}

// Close releases the connection.
func (s *Source) Close() error { return s.conn.Close() }

// List asks the kubelet which container holds each device, by device ID. It
// wraps ErrNoSocket when the socket does not exist.
func (s *Source) List(ctx context.Context) (map[string]Owner, error) {
	if _, err := os.Stat(s.opts.Socket); err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrNoSocket, s.opts.Socket, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	resp, err := s.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod resources at %s: %w", s.opts.Socket, err)
	}
	owners := map[string]Owner{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			o := Owner{Pod: p.GetName(), Namespace: p.GetNamespace(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if !strings.HasPrefix(d.GetResourceName(), s.opts.ResourcePrefix) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					// A GPU shared by time-slicing is advertised as
					// replicas <uuid>::<n>; they all are the one GPU.
					id, _, _ = strings.Cut(id, "::")
					if prev, ok := owners[id]; !ok || less(o, prev) {
						// Several holders of one shared GPU: the first by
						// name, so that series do not flap between them.
						owners[id] = o
					}
				}
			}
		}
	}
	return owners, nil
}

func less(a, b Owner) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	if a.Pod != b.Pod {
		return a.Pod < b.Pod
	}
	return a.Container < b.Container
}

// Owners is List for a scrape: nil when there is no attribution (no socket,
// or the kubelet did not answer), logging only when that changes.
func (s *Source) Owners(ctx context.Context) map[string]Owner {
	owners, err := s.List(ctx)
	switch {
	case err == nil:
		s.transition("on", func(l logr.Logger) {
			l.Info("GPU pod attribution on: reading allocations from the kubelet's pod-resources API")
		})
	case errors.Is(err, ErrNoSocket):
		s.transition("off", func(l logr.Logger) {
			l.Info("GPU pod attribution off: the kubelet's pod-resources socket is absent; GPU series carry empty pod, namespace and container labels until it appears")
		})
	default:
		s.transition("failing", func(l logr.Logger) {
			l.Error(err, "GPU pod attribution failing; GPU series carry empty pod labels until the kubelet answers")
		})
	}
	return owners
}

func (s *Source) transition(state string, log func(logr.Logger)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == state {
		return
	}
	s.state = state
	log(s.opts.Log.WithValues("socket", s.opts.Socket))
}
