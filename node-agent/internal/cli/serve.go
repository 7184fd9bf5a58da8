package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/dra"
	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/cdispec"
	"github.com/gpulab/gpulab/node-agent/internal/deviceplugin"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/podresources"
)

// podAttribution is the metrics' pod attribution from --pod-resources-socket:
// nil when it is off (an empty flag, or gpulab series only). The returned
// function releases it.
func podAttribution(f *runFlags, log logr.Logger) (func() map[string]podresources.Owner, func(), error) {
	if f.podResourcesSocket == "" || f.metricsFormat == metrics.FormatGPULab {
		return nil, func() {}, nil
	}
	src, err := podresources.New(podresources.Options{Socket: f.podResourcesSocket, Log: log.WithName("pod-attribution")})
	if err != nil {
		return nil, nil, fmt.Errorf("--pod-resources-socket: %w", err)
	}
	owners := func() map[string]podresources.Owner {
		// A scrape waits on the kubelet at most the Source's timeout.
		return src.Owners(context.Background())
	}
	return owners, func() { _ = src.Close() }, nil
}

// newDevicePlugin is the --device-plugin plugin, nil without the flag. It
// checks the directory now, so that a DaemonSet without the host mount fails
// at start with the reason.
func newDevicePlugin(f *runFlags, log logr.Logger) (*deviceplugin.Plugin, error) {
	if !f.devicePlugin {
		return nil, nil
	}
	st, err := os.Stat(f.devicePluginDir)
	if err == nil && !st.IsDir() {
		err = fmt.Errorf("%s is not a directory", f.devicePluginDir)
	}
	if err != nil {
		return nil, fmt.Errorf("--device-plugin-dir: %w (mount the kubelet's device-plugin directory from the host)", err)
	}
	return deviceplugin.New(deviceplugin.Options{
		Dir: f.devicePluginDir, ResourceName: f.devicePluginResource, Strategies: f.strategies, CDIKind: f.cdiKind,
		Log: log.WithName("device-plugin"),
	})
}

// newCDIWriter is the --cdi-spec-dir writer, nil without the flag.
func newCDIWriter(f *runFlags) (*cdispec.Writer, error) {
	if f.cdiSpecDir == "" {
		return nil, nil
	}
	w, err := cdispec.NewWriter(f.cdiSpecDir, f.cdiKind)
	if err != nil {
		return nil, fmt.Errorf("--cdi-spec-dir: %w", err)
	}
	return w, nil
}

// servePlugin hands a scan's GPUs to the device plugin. With a CDI writer,
// their spec is written first, so that the kubelet is never offered a GPU
// whose CDI name the runtime cannot resolve; if it cannot be written, every
// GPU is served Unhealthy until it can.
func servePlugin(p *deviceplugin.Plugin, w *cdispec.Writer, r *agent.Result, log logr.Logger) {
	devs := pluginDevices(r)
	if err := writeCDISpec(w, r); err != nil {
		log.Error(err, "serving every GPU Unhealthy to the kubelet until the CDI spec can be written")
		for i := range devs {
			devs[i].Healthy = false
		}
	}
	p.SetDevices(devs)
}

// serveDRA publishes a scan's GPUs as the node's DRA pool, after their CDI
// spec as servePlugin does: until it can be written, the pool is empty.
func serveDRA(ctx context.Context, p *dra.Plugin, w *cdispec.Writer, r *agent.Result, log logr.Logger) {
	st := &r.State.Status
	if err := writeCDISpec(w, r); err != nil {
		log.Error(err, "offering no DRA device until the CDI spec can be written")
		st = &v1alpha1.GPUInventoryStatus{}
	}
	if err := p.Update(ctx, st); err != nil {
		log.Error(err, "publishing the node's DRA devices")
	}
}

// writeCDISpec writes the mock GPUs' CDI spec (--cdi-spec-dir), if any.
func writeCDISpec(w *cdispec.Writer, r *agent.Result) error {
	if w == nil {
		return nil
	}
	gpus := []cdispec.GPU{}
	for _, g := range r.State.Status.GPUs {
		if g.UUID != "" {
			gpus = append(gpus, cdispec.GPU{UUID: g.UUID, Index: int(g.Index)})
		}
	}
	return w.Write(gpus)
}

// startDRAPlugin registers the --dra-driver kubelet plugin, nil without
// the flag.
func startDRAPlugin(ctx context.Context, f *runFlags, cfg *rest.Config, log logr.Logger) (*dra.Plugin, error) {
	if f.draDriver == "" {
		return nil, nil
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating API client: %w", err)
	}
	p, err := dra.StartPlugin(ctx, dra.PluginOptions{
		Driver: f.draDriver, Node: f.nodeName, Kube: kube, CDIDir: f.draCDIDir, GPUKind: f.cdiKind, Log: log.WithName("dra"),
	})
	if err != nil {
		return nil, fmt.Errorf("--dra-driver: %w (mount the kubelet's plugins and plugins_registry folders and --dra-cdi-dir from the host)", err)
	}
	return p, nil
}

// pluginDevices are a scan's GPUs as the device plugin serves them: those
// with a UUID (a GPU lost before it was ever identified has none), healthy
// only when the agent's verdict is Healthy.
func pluginDevices(r *agent.Result) []deviceplugin.Device {
	numa := map[int]int{}
	if s := r.Snapshot; s != nil {
		for i := range s.Devices {
			numa[s.Devices[i].Index] = s.Devices[i].NUMANode
		}
	}
	devs := []deviceplugin.Device{}
	for _, g := range r.State.Status.GPUs {
		if g.UUID == "" {
			continue
		}
		n, ok := numa[int(g.Index)]
		if !ok {
			n = -1
		}
		devs = append(devs, deviceplugin.Device{ID: g.UUID, Healthy: g.Health.State == v1alpha1.GPUHealthy, NUMANode: n})
	}
	return devs
}

// runWithPlugin runs the agent and, when p is set, the device plugin beside
// it; either failing stops both.
func runWithPlugin(ctx context.Context, a *agent.Agent, p *deviceplugin.Plugin) error {
	if p == nil {
		return a.Run(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() {
		err := p.Run(ctx)
		if err != nil {
			cancel(err)
		}
		done <- err
	}()
	err := a.Run(ctx)
	cancel(nil)
	// The plugin stops within its check interval, removing its socket.
	select {
	case perr := <-done:
		return errors.Join(err, perr)
	case <-time.After(10 * time.Second):
		return errors.Join(err, errors.New("device plugin: did not stop within 10s"))
	}
}
