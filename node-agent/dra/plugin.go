package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpulab/gpulab/api/v1alpha1"
)

// PluginOptions configure the kubelet plugin. Zero values take the
// defaults named on each field.
type PluginOptions struct {
	// Driver is the driver's name (DefaultDriverName).
	Driver string
	// Node is the node the agent runs on; its pool has its name.
	Node string
	// Kube reads claims and publishes the node's ResourceSlice.
	Kube kubernetes.Interface
	// CDIDir is the container runtime's CDI spec folder, where a prepared
	// claim's spec is written (/var/run/cdi).
	CDIDir string
	// GPUKind is the CDI kind whose devices, named by GPU UUID, give a
	// container one GPU: NVIDIA's container toolkit writes them on a GPU
	// node (nvidia-ctk cdi generate), the agent's --cdi-spec-dir on mock
	// GPUs ("nvidia.com/gpu").
	GPUKind string
	// RegistrarDir and PluginDir are the kubelet's plugin registration
	// folder and the driver's own socket folder (the kubelet's defaults,
	// /var/lib/kubelet/plugins_registry and /var/lib/kubelet/plugins/<driver>).
	RegistrarDir, PluginDir string
	// Log receives the plugin's errors and the library's logs.
	Log logr.Logger
}

func (o *PluginOptions) defaults() {
	if o.Driver == "" {
		o.Driver = DefaultDriverName
	}
	if o.CDIDir == "" {
		o.CDIDir = cdi.DefaultDynamicDir
	}
	if o.GPUKind == "" {
		o.GPUKind = "nvidia.com/gpu"
	}
}

// Plugin is the driver's node side, registered with the kubelet: it
// publishes the node's pool and prepares the claims allocated from it.
//
// Preparing a claim writes a CDI spec of its own (claimSpecFile), one CDI
// device per request that sets NVIDIA_VISIBLE_DEVICES to the request's GPU
// UUIDs, and hands the runtime, for each allocated GPU, that device and the
// GPU's <GPUKind>=<UUID>; unpreparing removes the spec. The spec also
// records the claim and its devices, so a device already prepared for
// another claim is refused: the driver is the last line of defence against
// two workloads sharing a GPU, and the specs survive an agent restart. At
// start the specs of claims gone meanwhile are removed (removeStaleSpecs);
// a spec that cannot be read is logged and ignored.
type Plugin struct {
	o      PluginOptions
	helper *kubeletplugin.Helper
	// specs writes the claims' specs (validated, atomically: a runtime
	// never reads half of one).
	specs *cdi.Cache
	mu    sync.Mutex
	// gpus are the GPUs of the last published scan by device name.
	gpus map[string]v1alpha1.GPUDevice
	// unreadable are the spec files already logged as unreadable: once
	// each, not at every prepare.
	unreadable map[string]bool
}

// StartPlugin registers the plugin with the kubelet and serves it until
// ctx is done or Stop. The node's pool is published from the first Update.
func StartPlugin(ctx context.Context, o PluginOptions) (*Plugin, error) {
	o.defaults()
	if o.Node == "" || o.Kube == nil {
		return nil, errors.New("the DRA kubelet plugin needs a node name and an API client")
	}
	if err := os.MkdirAll(o.CDIDir, 0o755); err != nil {
		return nil, fmt.Errorf("CDI spec folder: %w", err)
	}
	specCache, err := cdi.NewCache(cdi.WithSpecDirs(o.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI spec folder %s: %w", o.CDIDir, err)
	}
	p := &Plugin{o: o, specs: specCache, gpus: map[string]v1alpha1.GPUDevice{}, unreadable: map[string]bool{}}
	p.removeStaleSpecs(ctx)
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(o.Driver),
		kubeletplugin.NodeName(o.Node),
		kubeletplugin.KubeClient(o.Kube),
		// Health is the slice: an unhealthy GPU leaves it.
		kubeletplugin.HealthService(false),
	}
	if o.RegistrarDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(o.RegistrarDir))
	}
	if o.PluginDir != "" {
		opts = append(opts, kubeletplugin.PluginDataDirectoryPath(o.PluginDir))
	} else if err := os.MkdirAll(filepath.Join(kubeletplugin.KubeletPluginsDir, o.Driver), 0o750); err != nil {
		return nil, fmt.Errorf("plugin folder: %w", err)
	}
	p.helper, err = kubeletplugin.Start(klog.NewContext(ctx, o.Log), p, opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the DRA kubelet plugin %s: %w", o.Driver, err)
	}
	return p, nil
}

// Update publishes a scan's healthy GPUs as the node's pool and prepares
// later claims against them.
func (p *Plugin) Update(ctx context.Context, st *v1alpha1.GPUInventoryStatus) error {
	p.mu.Lock()
	p.gpus = map[string]v1alpha1.GPUDevice{}
	for _, g := range st.GPUs {
		p.gpus[deviceName(g)] = g
	}
	p.mu.Unlock()
	return p.helper.PublishResources(ctx, *Resources(p.o.Node, st))
}

// Stop unregisters the plugin and stops publishing; the slice stays until
// the Node goes.
func (p *Plugin) Stop() { p.helper.Stop() }

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (p *Plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := p.prepare(c)
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
	}
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: it removes
// the claims' specs; a claim never prepared, or already unprepared, has
// none.
func (p *Plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := os.Remove(filepath.Join(p.o.CDIDir, claimSpecFile(c.UID)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			err = nil
		case err != nil:
			err = fmt.Errorf("claim %s: removing its CDI spec: %w", c.NamespacedName, err)
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: publishing errors are
// logged and retried by the library.
func (p *Plugin) HandleError(_ context.Context, err error, msg string) {
	p.o.Log.Error(err, msg, "driver", p.o.Driver)
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin; the health
// service is off (HealthService(false)), so it is never called.
func (p *Plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// claimKind is the CDI kind of the prepared claims' devices.
func (p *Plugin) claimKind() string { return "k8s." + p.o.Driver + "/claim" }

// prepare writes a claim's spec and returns its devices for the kubelet.
// Only this driver's results are the agent's; one from another pool (a
// claim allocated for another node) or naming a GPU the node does not
// have is an error, as is a GPU another prepared claim holds.
func (p *Plugin) prepare(c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	byRequest := map[string][]string{} // request → GPU UUIDs
	var requests, names []string
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != p.o.Driver {
			continue
		}
		if r.Pool != p.o.Node {
			return nil, fmt.Errorf("claim %s/%s: device %s/%s is not in this node's pool %s", c.Namespace, c.Name, r.Pool, r.Device, p.o.Node)
		}
		g, ok := p.gpus[r.Device]
		if !ok || g.UUID == "" {
			return nil, fmt.Errorf("claim %s/%s: this node has no GPU %s", c.Namespace, c.Name, r.Device)
		}
		if _, seen := byRequest[r.Request]; !seen {
			requests = append(requests, r.Request)
		}
		byRequest[r.Request] = append(byRequest[r.Request], g.UUID)
		names = append(names, r.Device)
		results = append(results, r)
	}
	if len(results) == 0 {
		// Only other drivers' devices: nothing of the agent's to prepare.
		return nil, nil
	}
	if err := p.heldElsewhere(c.UID, names); err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	spec := &specs.Spec{
		Version: specs.CurrentVersion,
		Kind:    p.claimKind(),
		Annotations: map[string]string{
			devicesAnnotation: strings.Join(names, ","),
			claimAnnotation:   c.Namespace + "/" + c.Name,
		},
	}
	for _, req := range requests {
		spec.Devices = append(spec.Devices, specs.Device{
			Name:           cdiRequestDevice(c.UID, req),
			ContainerEdits: specs.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(byRequest[req], ",")}},
		})
	}
	if err := p.specs.WriteSpec(spec, claimSpecFile(c.UID)); err != nil {
		return nil, fmt.Errorf("claim %s/%s: writing its CDI spec: %w", c.Namespace, c.Name, err)
	}
	devs := make([]kubeletplugin.Device, 0, len(results))
	first := map[string]bool{}
	for _, r := range results {
		ids := []string{p.o.GPUKind + "=" + p.gpus[r.Device].UUID}
		// The request's device once per container: the first of its GPUs
		// carries it.
		if !first[r.Request] {
			first[r.Request] = true
			ids = append(ids, p.claimKind()+"="+cdiRequestDevice(c.UID, r.Request))
		}
		devs = append(devs, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: ids})
	}
	return devs, nil
}

// cdiRequestDevice names a request's CDI device: the claim's UID keeps
// names unique (a runtime's cached spec never answers for a new claim),
// a subrequest's "/" is not allowed in a name.
func cdiRequestDevice(uid types.UID, request string) string {
	return string(uid) + "-" + strings.ReplaceAll(request, "/", "-")
}

// deviceName is a GPU's device name in the pool.
func deviceName(g v1alpha1.GPUDevice) string { return fmt.Sprintf("gpu-%d", g.Index) }
