package deviceplugin

import (
	"fmt"
	"slices"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// Strategy is how Allocate tells the container runtime which GPUs a
// container gets, the NVIDIA device plugin's --device-list-strategy.
type Strategy string

// The strategies. The envvar one trusts the container's environment: any
// pod that sets NVIDIA_VISIBLE_DEVICES=all itself sees every GPU of the node
// under the NVIDIA runtime. The others carry the list where a pod cannot
// write it (mounts the kubelet makes, CDI device names the runtime resolves),
// which is why clusters shared between tenants use them.
const (
	// StrategyEnvvar sets NVIDIA_VISIBLE_DEVICES to the GPUs' UUIDs.
	StrategyEnvvar Strategy = "envvar"
	// StrategyVolumeMounts mounts the host's /dev/null at
	// VolumeMountsRoot/<UUID> for each GPU and points NVIDIA_VISIBLE_DEVICES
	// at that folder, the NVIDIA container toolkit's
	// accept-nvidia-visible-devices-as-volume-mounts.
	StrategyVolumeMounts Strategy = "volume-mounts"
	// StrategyCDIAnnotations names the GPUs as CDI devices
	// (<CDI kind>=<UUID>) in a cdi.k8s.io/ container annotation.
	StrategyCDIAnnotations Strategy = "cdi-annotations"
	// StrategyCDICRI names them in the CRI's CDIDevices field (Kubernetes
	// 1.31+, containerd 1.7+ with CDI on, the default in 2.x).
	StrategyCDICRI Strategy = "cdi-cri"
)

// Strategies are the valid strategies, in the order Allocate applies them.
var Strategies = []Strategy{StrategyEnvvar, StrategyVolumeMounts, StrategyCDIAnnotations, StrategyCDICRI}

const (
	// VolumeMountsRoot is the container folder of the volume-mounts
	// strategy, the one the NVIDIA container toolkit reads.
	VolumeMountsRoot = "/var/run/nvidia-container-devices"
	// DefaultCDIKind is the CDI kind of the GPUs, the one NVIDIA's
	// container toolkit generates (nvidia-ctk cdi generate), whose devices
	// are also named by UUID.
	DefaultCDIKind = "nvidia.com/gpu"
	// cdiAnnotationPlugin names the plugin in the CDI annotation's key.
	cdiAnnotationPlugin = "gpulab"
)

// ParseStrategies parses a comma-separated list of strategies. envvar and
// volume-mounts both set NVIDIA_VISIBLE_DEVICES, so they exclude each other.
func ParseStrategies(s string) ([]Strategy, error) {
	var out []Strategy
	for part := range strings.SplitSeq(s, ",") {
		st := Strategy(strings.TrimSpace(part))
		if !slices.Contains(Strategies, st) {
			return nil, fmt.Errorf("device list strategy %q: want a comma-separated list of %s", st, joinStrategies(Strategies))
		}
		if slices.Contains(out, st) {
			return nil, fmt.Errorf("device list strategy %q given twice", st)
		}
		out = append(out, st)
	}
	if slices.Contains(out, StrategyEnvvar) && slices.Contains(out, StrategyVolumeMounts) {
		return nil, fmt.Errorf("device list strategies %s and %s both set %s: choose one", StrategyEnvvar, StrategyVolumeMounts, VisibleDevicesEnv)
	}
	return out, nil
}

// ValidateCDIKind checks a CDI kind, vendor/class.
func ValidateCDIKind(kind string) error {
	vendor, class := parser.ParseQualifier(kind)
	if vendor == "" || class == "" {
		return fmt.Errorf("CDI kind %q: want vendor/class, e.g. %s", kind, DefaultCDIKind)
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("CDI kind %q: %w", kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("CDI kind %q: %w", kind, err)
	}
	return nil
}

func joinStrategies(ss []Strategy) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// containerResponse is what one container of ids gets under the plugin's
// strategies.
func (p *Plugin) containerResponse(ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{}
	cdiNames := make([]string, len(ids))
	for i, id := range ids {
		cdiNames[i] = p.opts.CDIKind + "=" + id
	}
	for _, st := range p.opts.Strategies {
		switch st {
		case StrategyEnvvar:
			resp.Envs = map[string]string{VisibleDevicesEnv: strings.Join(ids, ",")}
		case StrategyVolumeMounts:
			resp.Envs = map[string]string{VisibleDevicesEnv: VolumeMountsRoot}
			for _, id := range ids {
				resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: VolumeMountsRoot + "/" + id, HostPath: "/dev/null", ReadOnly: true})
			}
		case StrategyCDIAnnotations:
			// The key needs a name unique among the pod's containers: the
			// first GPU's, which no other container holds.
			a, err := cdi.UpdateAnnotations(nil, cdiAnnotationPlugin, ids[0], cdiNames)
			if err != nil {
				return nil, fmt.Errorf("CDI annotation for %v: %w", ids, err)
			}
			resp.Annotations = a
		case StrategyCDICRI:
			for _, n := range cdiNames {
				resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: n})
			}
		}
	}
	return resp, nil
}
