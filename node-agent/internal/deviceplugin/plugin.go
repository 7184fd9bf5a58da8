package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Defaults.
const (
	// DefaultResourceName is the resource the plugin serves.
	DefaultResourceName = "nvidia.com/gpu"
	// DefaultSocketName is the plugin's socket in the device-plugin
	// directory; the NVIDIA plugin's is nvidia-gpu.sock, so both can be
	// told apart on a node (only one of them should serve nvidia.com/gpu).
	DefaultSocketName = "gpulab-gpu.sock"
	// DefaultDir is the kubelet's device-plugin directory.
	DefaultDir = pluginapi.DevicePluginPath
	// VisibleDevicesEnv is the variable Allocate sets to the allocated GPUs'
	// UUIDs, comma-separated.
	VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"
)

// Device is one GPU the plugin serves.
type Device struct {
	// ID is the GPU UUID.
	ID string
	// Healthy is whether the agent's health verdict is Healthy.
	Healthy bool
	// NUMANode is the GPU's NUMA node, -1 when unknown.
	NUMANode int
}

// Options configures a Plugin.
type Options struct {
	// ResourceName is the extended resource served. Defaults to
	// DefaultResourceName.
	ResourceName string
	// Dir is the kubelet's device-plugin directory, where its
	// Registration socket (kubelet.sock) lives and the plugin's socket is
	// made. Defaults to DefaultDir (/var/lib/kubelet/device-plugins/).
	Dir string
	// SocketName is the plugin's socket in Dir. Defaults to
	// DefaultSocketName.
	SocketName string
	// CheckInterval is how often Run checks that its socket still exists
	// and the kubelet's is there, beside the directory's file events.
	// Defaults to 1s.
	CheckInterval time.Duration
	// RegisterTimeout bounds one Register call. Defaults to 10s.
	RegisterTimeout time.Duration
	// Strategies say how Allocate hands the GPUs to the container
	// runtime. Defaults to envvar alone, as the NVIDIA device plugin does.
	Strategies []Strategy
	// CDIKind is the CDI kind of the GPUs' device names under the cdi-*
	// strategies. Defaults to DefaultCDIKind.
	CDIKind string
	// Log defaults to logr.Discard().
	Log logr.Logger
}

// Plugin serves a node's GPUs to the kubelet.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	opts Options
	log  logr.Logger

	mu      sync.Mutex
	devices []Device
	// changed is closed, and replaced, whenever devices change.
	changed chan struct{}
}

var _ pluginapi.DevicePluginServer = (*Plugin)(nil)

// New returns a Plugin with no devices.
func New(opts Options) (*Plugin, error) {
	if opts.ResourceName == "" {
		opts.ResourceName = DefaultResourceName
	}
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.SocketName == "" {
		opts.SocketName = DefaultSocketName
	}
	if strings.ContainsRune(opts.SocketName, filepath.Separator) {
		return nil, fmt.Errorf("device plugin socket name %q: want a file name in %s", opts.SocketName, opts.Dir)
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = time.Second
	}
	if opts.RegisterTimeout <= 0 {
		opts.RegisterTimeout = 10 * time.Second
	}
	if len(opts.Strategies) == 0 {
		opts.Strategies = []Strategy{StrategyEnvvar}
	}
	if opts.CDIKind == "" {
		opts.CDIKind = DefaultCDIKind
	}
	if err := ValidateCDIKind(opts.CDIKind); err != nil {
		return nil, err
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &Plugin{opts: opts, log: opts.Log.WithValues("resource", opts.ResourceName), changed: make(chan struct{})}, nil
}

// Socket is the plugin's socket path.
func (p *Plugin) Socket() string { return filepath.Join(p.opts.Dir, p.opts.SocketName) }

// KubeletSocket is the kubelet's Registration socket path.
func (p *Plugin) KubeletSocket() string { return filepath.Join(p.opts.Dir, "kubelet.sock") }

// SetDevices replaces the devices served; ListAndWatch streams send the new
// list when it differs. A device of unknown NUMA node (-1) keeps the one it
// was served with: a failed scan knows none, and a GPU never moves.
func (p *Plugin) SetDevices(devices []Device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	devices = slices.Clone(devices)
	for i := range devices {
		if devices[i].NUMANode >= 0 {
			continue
		}
		for _, old := range p.devices {
			if old.ID == devices[i].ID {
				devices[i].NUMANode = old.NUMANode
			}
		}
	}
	if slices.Equal(p.devices, devices) {
		return
	}
	p.devices = devices
	close(p.changed)
	p.changed = make(chan struct{})
}

// Devices returns the devices served.
func (p *Plugin) Devices() []Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.devices)
}

func (p *Plugin) watch() ([]Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.devices), p.changed
}

func (p *Plugin) pluginOptions() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// GetDevicePluginOptions implements pluginapi.DevicePluginServer.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.pluginOptions(), nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the devices now, then
// again whenever they change, until the kubelet hangs up or the server stops.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		devices, changed := p.watch()
		resp := &pluginapi.ListAndWatchResponse{Devices: make([]*pluginapi.Device, len(devices))}
		for i, d := range devices {
			resp.Devices[i] = apiDevice(d)
		}
		if err := stream.Send(resp); err != nil {
			return fmt.Errorf("sending devices to the kubelet: %w", err)
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func apiDevice(d Device) *pluginapi.Device {
	health := pluginapi.Unhealthy
	if d.Healthy {
		health = pluginapi.Healthy
	}
	ad := &pluginapi.Device{ID: d.ID, Health: health}
	if d.NUMANode >= 0 {
		ad.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMANode)}}}
	}
	return ad
}

// Allocate implements pluginapi.DevicePluginServer. Each container gets the
// UUIDs it was allocated in the form of each of the plugin's strategies; an
// ID the plugin does not serve, or one asked twice, fails the whole request.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range p.Devices() {
		known[d.ID] = true
	}
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		ids := c.GetDevicesIds()
		if len(ids) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "allocate %s: a container request names no devices", p.opts.ResourceName)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if !known[id] {
				return nil, status.Errorf(codes.InvalidArgument, "allocate %s: unknown device %q (this node's GPUs are %s)",
					p.opts.ResourceName, id, strings.Join(sortedKeys(known), ", "))
			}
			if seen[id] {
				return nil, status.Errorf(codes.InvalidArgument, "allocate %s: device %q asked twice for one container", p.opts.ResourceName, id)
			}
			seen[id] = true
		}
		cr, err := p.containerResponse(ids)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "allocate %s: %v", p.opts.ResourceName, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// GetPreferredAllocation implements pluginapi.DevicePluginServer: the
// devices that must be included, then the rest from one NUMA node when the
// request fits one (the fullest node it fits least, keeping larger nodes
// whole for larger requests), else from the nodes with the most devices
// free; ties by GPU index.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	devices := p.Devices()
	order := make(map[string]int, len(devices))
	numa := make(map[string]int, len(devices))
	for i, d := range devices {
		order[d.ID], numa[d.ID] = i, d.NUMANode
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
			DeviceIDs: prefer(c.GetAvailableDeviceIDs(), c.GetMustIncludeDeviceIDs(), int(c.GetAllocationSize()), order, numa),
		})
	}
	return resp, nil
}

func prefer(available, must []string, size int, order, numa map[string]int) []string {
	chosen := []string{}
	taken := map[string]bool{}
	for _, id := range must {
		if !taken[id] {
			chosen, taken[id] = append(chosen, id), true
		}
	}
	var rest []string
	for _, id := range available {
		if _, ok := order[id]; ok && !taken[id] {
			rest, taken[id] = append(rest, id), true
		}
	}
	need := size - len(chosen)
	if need <= 0 {
		return chosen
	}
	free, held := map[int]int{}, map[int]int{}
	for _, id := range rest {
		free[numa[id]]++
	}
	for _, id := range chosen {
		held[numa[id]]++
	}
	fits := func(n int) bool { return free[n] >= need }
	slices.SortStableFunc(rest, func(a, b string) int {
		na, nb := numa[a], numa[b]
		if na == nb {
			return order[a] - order[b]
		}
		if held[na] != held[nb] {
			return held[nb] - held[na] // beside the devices it must have
		}
		if fits(na) != fits(nb) {
			if fits(na) {
				return -1
			}
			return 1
		}
		if fits(na) && free[na] != free[nb] {
			return free[na] - free[nb] // best fit
		}
		if free[na] != free[nb] {
			return free[nb] - free[na] // spread over the fewest nodes
		}
		return na - nb
	})
	return append(chosen, rest[:min(need, len(rest))]...)
}

// PreStartContainer implements pluginapi.DevicePluginServer; the plugin asks
// for no pre-start call.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// Run serves the plugin and keeps it registered with the kubelet until ctx
// is done. It fails only when it cannot serve its socket or watch Dir.
func (p *Plugin) Run(ctx context.Context) error {
	// Events, not polling, tell a restarted kubelet: its new kubelet.sock
	// may reuse the old one's inode and time stamp.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("device plugin: watching %s: %w", p.opts.Dir, err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(p.opts.Dir); err != nil {
		return fmt.Errorf("device plugin: watching %s: %w", p.opts.Dir, err)
	}
	for {
		restart, err := p.serveOnce(ctx, w)
		if err != nil {
			return err
		}
		if !restart {
			return nil
		}
		p.log.Info("the kubelet removed the plugin's socket (it restarted); serving again", "socket", p.Socket())
	}
}

// serveOnce serves the socket and keeps it registered until ctx is done
// (false) or the socket was removed (true).
func (p *Plugin) serveOnce(ctx context.Context, w *fsnotify.Watcher) (restart bool, err error) {
	sock := p.Socket()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("device plugin: removing the stale socket %s: %w", sock, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return false, fmt.Errorf("device plugin: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	var serveErr error
	served := make(chan struct{})
	go func() { defer close(served); serveErr = srv.Serve(ln) }()
	defer func() {
		srv.Stop() // also ends ListAndWatch streams
		<-served
		_ = os.Remove(sock)
	}()

	ticker := time.NewTicker(p.opts.CheckInterval)
	defer ticker.Stop()
	registered, waiting, failures := false, false, 0
	nextTry := time.Time{}
	for {
		// Only the plugin makes its socket, so a missing one means the
		// kubelet removed it, as it does to every plugin's when it starts.
		if _, err := os.Stat(sock); err != nil {
			return true, nil
		}
		_, kerr := os.Stat(p.KubeletSocket())
		switch {
		case kerr != nil:
			if registered || !waiting {
				p.log.Info("waiting for the kubelet's device-plugin socket", "socket", p.KubeletSocket())
			}
			registered, waiting = false, true
		case !registered && !time.Now().Before(nextTry):
			if err := p.register(ctx); err != nil {
				if ctx.Err() != nil {
					return false, nil
				}
				failures++
				// The first retry comes soon: a new kubelet.sock exists
				// a moment before the kubelet listens on it.
				backoff := min(p.opts.CheckInterval<<min(failures-1, 6), 30*time.Second)
				nextTry = time.Now().Add(backoff)
				p.log.Error(err, "registering with the kubelet; retrying", "after", backoff)
				break
			}
			registered, waiting, failures = true, false, 0
			p.log.Info("registered with the kubelet", "socket", sock, "devices", len(p.Devices()))
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-served:
			return false, fmt.Errorf("device plugin: serving %s: %w", sock, serveErr)
		case e, ok := <-w.Events:
			if ok && filepath.Clean(e.Name) == filepath.Clean(p.KubeletSocket()) && e.Has(fsnotify.Create) {
				// A new kubelet: register with it now.
				registered, failures, nextTry = false, 0, time.Time{}
			}
		case err, ok := <-w.Errors:
			if ok {
				p.log.Error(err, "watching the device-plugin directory; checking every interval instead", "interval", p.opts.CheckInterval)
			}
		case <-ticker.C:
		}
	}
}

// register calls the kubelet's Registration service.
func (p *Plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+p.KubeletSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing %s: %w", p.KubeletSocket(), err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, p.opts.RegisterTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.opts.SocketName,
		ResourceName: p.opts.ResourceName,
		Options:      p.pluginOptions(),
	})
	if err != nil {
		return fmt.Errorf("registering %s at %s: %w", p.opts.ResourceName, p.KubeletSocket(), err)
	}
	return nil
}
