package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/dra"
	"github.com/gpulab/gpulab/node-agent/internal/deviceplugin"
	"github.com/gpulab/gpulab/node-agent/internal/health"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/podresources"
)

// backendSpec is a parsed --nvml value.
type backendSpec struct {
	// profile is empty for the real library.
	profile string
}

func (b backendSpec) String() string {
	if b.profile == "" {
		return "real"
	}
	return "mock:" + b.profile
}

func parseBackend(s string) (backendSpec, error) {
	switch {
	case s == "real":
		return backendSpec{}, nil
	case strings.HasPrefix(s, "mock:"):
		p := strings.TrimPrefix(s, "mock:")
		if _, ok := mock.Profiles[p]; ok {
			return backendSpec{profile: p}, nil
		}
	}
	return backendSpec{}, fmt.Errorf("--nvml=%q: want real or mock:<profile> with profile one of %s",
		s, strings.Join(mock.ProfileNames(), ", "))
}

// common are the flags of both the agent and the inventory command.
type common struct {
	nodeName    string
	nvml        string
	allowNoGPU  bool
	ignoredXIDs string
	logFormat   string

	backend backendSpec
	ignored []uint64
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"),
		"node whose GPUs these are: names the GPUInventory and the labelled node (default $NODE_NAME, from the downward API)")
	fs.StringVar(&c.nvml, "nvml", "real", "NVML backend: real (libnvidia-ml.so.1) or mock:<profile> with profile one of "+
		strings.Join(mock.ProfileNames(), ", "))
	fs.BoolVar(&c.allowNoGPU, "allow-no-gpu", false,
		"on a node without an NVIDIA driver, publish an empty inventory (and keep retrying) instead of exiting")
	fs.StringVar(&c.ignoredXIDs, "ignored-xids", joinXIDs(health.DefaultIgnoredXIDs),
		"comma-separated XIDs that leave a GPU healthy (application errors); empty ignores none")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or text")
}

// validate checks the flags; simulate skips --nvml, which the fleet
// simulator chooses per node.
func (c *common) validate(simulate bool) error {
	var errs []error
	var err error
	if !simulate {
		if c.backend, err = parseBackend(c.nvml); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ignored, err = parseXIDs(c.ignoredXIDs); err != nil {
		errs = append(errs, err)
	}
	if c.logFormat != "json" && c.logFormat != "text" {
		errs = append(errs, fmt.Errorf("--log-format=%q: want json or text", c.logFormat))
	}
	return errors.Join(errs...)
}

func parseXIDs(s string) ([]uint64, error) {
	ids := []uint64{}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		x, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--ignored-xids: %q is not an XID number", f)
		}
		ids = append(ids, x)
	}
	return ids, nil
}

func joinXIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, x := range ids {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}

// runFlags are the agent's flags.
type runFlags struct {
	common
	interval          time.Duration
	kubeconfig        string
	leaseNamespace    string
	labelNode         bool
	metricsAddr       string
	metricsSecure     bool
	probeAddr         string
	advertiseCapacity bool
	simulate          bool
	draDriver         string
	nvmlSet           bool

	metricsFormatName  string
	metricsFormat      metrics.Format
	podResourcesSocket string

	devicePlugin         bool
	devicePluginDir      string
	devicePluginResource string
	strategyList         string
	strategies           []deviceplugin.Strategy
	cdiKind              string
	cdiSpecDir           string
	draCDIDir            string

	unhealthyAfterFailedScans int
}

// serviceAccountNamespaceFile is where a pod's service-account token mount
// names the pod's namespace.
var serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// podNamespace is the namespace this agent's pod runs in: $POD_NAMESPACE
// (the downward API), else the service account's namespace file, else
// v1alpha1.DefaultHeartbeatLeaseNamespace (outside a pod).
func podNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return v1alpha1.DefaultHeartbeatLeaseNamespace
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.common.register(fs)
	fs.DurationVar(&f.interval, "interval", 30*time.Second, "rescan interval; health events trigger a rescan at once")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)")
	// The agent's Role for its Leases is in its own namespace, wherever it
	// is installed; a fixed default would be Forbidden elsewhere.
	fs.StringVar(&f.leaseNamespace, "lease-namespace", podNamespace(),
		"namespace of the node's heartbeat Lease, renewed every minute; the operator's --agent-lease-namespace must name the same one "+
			"(default: the pod's own namespace, from $POD_NAMESPACE or the service account's namespace file; "+v1alpha1.DefaultHeartbeatLeaseNamespace+" outside a pod)")
	fs.BoolVar(&f.labelNode, "label-node", true, "apply GPU Feature Discovery labels (nvidia.com/gpu.*) to the node; turn off where GFD runs")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080",
		"address of /metrics (and of /healthz and /readyz unless --health-probe-bind-address is set); 0 disables")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", false,
		"serve /metrics over HTTPS (self-signed certificate) only to callers the API server authenticates (TokenReview) "+
			"and authorizes for get on /metrics (SubjectAccessReview); needs --health-probe-bind-address")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", "",
		"address of /healthz and /readyz over plain HTTP, apart from /metrics; empty serves them with /metrics")
	fs.BoolVar(&f.advertiseCapacity, "advertise-capacity", false,
		"TESTBEDS ONLY: set the node's nvidia.com/gpu capacity to the healthy GPU count, as the device plugin would")
	fs.BoolVar(&f.simulate, "simulate-testbed-nodes", false,
		"TESTBEDS ONLY: publish for every node labelled "+simulatorProfileLabel+"=<profile>, each with a mock NVML of its profile")
	fs.StringVar(&f.draDriver, "dra-driver", "",
		"serve the healthy GPUs through Dynamic Resource Allocation as devices of this driver (e.g. "+dra.DefaultDriverName+
			"): a pool per node in ResourceSlices owned by the Node and, on a node with a kubelet, the driver's kubelet plugin "+
			"(registered in /var/lib/kubelet/plugins_registry, its socket in /var/lib/kubelet/plugins/<driver>, both mounted from the host), "+
			"which prepares each claim as CDI devices; instead of --device-plugin, not beside it; empty serves none")
	fs.StringVar(&f.draCDIDir, "dra-cdi-dir", "/var/run/cdi",
		"with --dra-driver on a node: the container runtime's CDI spec folder (mounted from the host), where a prepared claim's spec is written "+
			"(NVIDIA_VISIBLE_DEVICES of its GPUs) and removed when it is unprepared; each GPU itself is the CDI device <--cdi-kind>=<UUID>")
	fs.StringVar(&f.metricsFormatName, "metrics-format", string(metrics.FormatBoth),
		"per-GPU series on /metrics: gpulab (gpulab_gpu_*, base units), dcgm (the DCGM exporter's DCGM_FI_DEV_* names, units and labels, "+
			"with pod attribution) or both")
	fs.StringVar(&f.podResourcesSocket, "pod-resources-socket", podresources.DefaultSocket,
		"the kubelet's pod-resources socket, read on every scrape for the pod, namespace and container of each GPU on the DCGM series; "+
			"absent: empty pod labels (logged once); empty disables")
	fs.BoolVar(&f.devicePlugin, "device-plugin", false,
		"serve this node's GPUs to the kubelet as a device plugin (one device per GPU UUID, health from the agent's checks, "+
			"Allocate hands them over as --device-list-strategy says); needs --device-plugin-dir mounted from the host; instead of the NVIDIA device plugin, not beside it")
	fs.StringVar(&f.devicePluginDir, "device-plugin-dir", deviceplugin.DefaultDir,
		"the kubelet's device-plugin directory: its kubelet.sock, and the agent's "+deviceplugin.DefaultSocketName+" with --device-plugin")
	fs.StringVar(&f.devicePluginResource, "device-plugin-resource", deviceplugin.DefaultResourceName,
		"extended resource the device plugin serves")
	fs.StringVar(&f.strategyList, "device-list-strategy", string(deviceplugin.StrategyEnvvar),
		"how the device plugin tells the container runtime a container's GPUs, a comma-separated list as NVIDIA's plugin takes: "+
			"envvar (NVIDIA_VISIBLE_DEVICES=<UUIDs>; a pod that sets NVIDIA_VISIBLE_DEVICES=all itself sees every GPU), "+
			"volume-mounts (/dev/null mounted at "+deviceplugin.VolumeMountsRoot+"/<UUID>), "+
			"cdi-annotations or cdi-cri (CDI devices <--cdi-kind>=<UUID>, in a container annotation or in the CRI's CDI field)")
	fs.StringVar(&f.cdiKind, "cdi-kind", deviceplugin.DefaultCDIKind,
		"CDI kind (vendor/class) of the GPUs' device names under the cdi-* strategies; NVIDIA's container toolkit generates "+deviceplugin.DefaultCDIKind)
	fs.StringVar(&f.cdiSpecDir, "cdi-spec-dir", "",
		"TESTBEDS ONLY (mock NVML): write the CDI spec of this node's mock GPUs into this folder (e.g. /var/run/cdi), "+
			"each a device node /dev/nvidia<index>; with real GPUs, NVIDIA's container toolkit writes it (nvidia-ctk cdi generate)")
	fs.IntVar(&f.unhealthyAfterFailedScans, "unhealthy-after-failed-scans", 3,
		"after this many NVML scans in a row failed, no GPU of the node counts as healthy until a scan succeeds: "+
			"Unknown in the GPUInventory (reason ScansFailing, summary.healthy 0) and Unhealthy to the kubelet with --device-plugin")
}

func (f *runFlags) validate(fs *flag.FlagSet) error {
	fs.Visit(func(fl *flag.Flag) { f.nvmlSet = f.nvmlSet || fl.Name == "nvml" })
	errs := []error{f.common.validate(f.simulate)}
	if f.interval < time.Second {
		errs = append(errs, fmt.Errorf("--interval=%s: must be at least 1s", f.interval))
	}
	if f.unhealthyAfterFailedScans < 1 {
		errs = append(errs, fmt.Errorf("--unhealthy-after-failed-scans=%d: must be at least 1", f.unhealthyAfterFailedScans))
	}
	if msgs := validation.IsDNS1123Label(f.leaseNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--lease-namespace=%q: not a namespace name: %s", f.leaseNamespace, strings.Join(msgs, "; ")))
	}
	if f.metricsSecure && !disabled(f.metricsAddr) && disabled(f.probeAddr) {
		// The kubelet's probes carry no credentials.
		errs = append(errs, errors.New("--metrics-secure needs --health-probe-bind-address: probes cannot authenticate"))
	}
	var err error
	if f.metricsFormat, err = metrics.ParseFormat(f.metricsFormatName); err != nil {
		errs = append(errs, fmt.Errorf("--metrics-format=%w", err))
	}
	if f.devicePlugin {
		if f.advertiseCapacity {
			errs = append(errs, errors.New("--advertise-capacity conflicts with --device-plugin: the kubelet sets nvidia.com/gpu capacity from the device plugin"))
		}
		if f.simulate {
			errs = append(errs, errors.New("--device-plugin conflicts with --simulate-testbed-nodes: fake nodes have no kubelet to serve"))
		}
		if f.devicePluginDir == "" {
			errs = append(errs, errors.New("--device-plugin needs --device-plugin-dir"))
		}
		if msgs := validation.IsQualifiedName(f.devicePluginResource); len(msgs) > 0 || !strings.Contains(f.devicePluginResource, "/") {
			errs = append(errs, fmt.Errorf("--device-plugin-resource=%q: want an extended resource name such as nvidia.com/gpu", f.devicePluginResource))
		}
	}
	errs = append(errs, f.validateStrategies())
	if f.draDriver != "" {
		if msgs := validation.IsDNS1123Subdomain(f.draDriver); len(msgs) > 0 || !strings.Contains(f.draDriver, ".") {
			errs = append(errs, fmt.Errorf("--dra-driver=%q: want a DNS subdomain with a domain the driver owns, such as %s", f.draDriver, dra.DefaultDriverName))
		}
		if f.devicePlugin {
			errs = append(errs, errors.New("--dra-driver conflicts with --device-plugin: the kubelet would hand out each GPU twice, once per mechanism"))
		}
		if f.advertiseCapacity && !f.simulate {
			errs = append(errs, errors.New("--dra-driver conflicts with --advertise-capacity: a GPU claimed through DRA would also count as nvidia.com/gpu"))
		}
		if !f.simulate && f.draCDIDir == "" {
			errs = append(errs, errors.New("--dra-driver needs --dra-cdi-dir on a node: the runtime reads the claims' CDI specs there"))
		}
	}
	if f.simulate {
		if f.nvmlSet && f.nvml != "mock" {
			errs = append(errs, fmt.Errorf("--nvml=%s conflicts with --simulate-testbed-nodes, which gives each node a mock of its own profile", f.nvml))
		}
		if f.nodeName != "" && os.Getenv("NODE_NAME") != f.nodeName {
			errs = append(errs, errors.New("--node-name conflicts with --simulate-testbed-nodes, which publishes for every fake GPU node"))
		}
	} else if f.nodeName == "" {
		errs = append(errs, errors.New("--node-name is required (or set NODE_NAME, e.g. from the downward API: fieldRef spec.nodeName)"))
	}
	return errors.Join(errs...)
}

// validateStrategies checks --device-list-strategy, --cdi-kind and
// --cdi-spec-dir.
func (f *runFlags) validateStrategies() error {
	var errs []error
	var err error
	if f.strategies, err = deviceplugin.ParseStrategies(f.strategyList); err != nil {
		errs = append(errs, fmt.Errorf("--device-list-strategy: %w", err))
	}
	if err := deviceplugin.ValidateCDIKind(f.cdiKind); err != nil {
		errs = append(errs, fmt.Errorf("--cdi-kind: %w", err))
	}
	if f.cdiSpecDir != "" {
		if !f.devicePlugin && (f.draDriver == "" || f.simulate) {
			errs = append(errs, errors.New("--cdi-spec-dir needs --device-plugin or --dra-driver: the spec is of the GPUs they serve"))
		}
		if f.backend.profile == "" {
			errs = append(errs, errors.New("--cdi-spec-dir writes device nodes of mock GPUs and needs --nvml=mock:<profile>; "+
				"for real GPUs, NVIDIA's container toolkit writes the spec (nvidia-ctk cdi generate)"))
		}
	}
	return errors.Join(errs...)
}

// disabled reports whether a bind address turns its server off.
func disabled(addr string) bool { return addr == "" || addr == "0" }
