package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/cli"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

func run(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func hasDriver() bool {
	b := nvml.NewReal(nvml.Options{})
	if b.Init() != nil {
		return false
	}
	_ = b.Shutdown()
	return true
}

func TestFlagValidation(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--node-name is required"},
		{[]string{"--node-name=a", "--nvml=mock:dgx-z900"}, `--nvml="mock:dgx-z900": want real or mock:<profile> with profile one of dgx-a100, dgx-b200, dgx-h100, dgx-h200`},
		{[]string{"--node-name=a", "--interval=10ms"}, "--interval=10ms: must be at least 1s"},
		{[]string{"--node-name=a", "--unhealthy-after-failed-scans=0"}, "--unhealthy-after-failed-scans=0: must be at least 1"},
		{[]string{"--node-name=a", "--ignored-xids=13,x"}, `--ignored-xids: "x" is not an XID number`},
		{[]string{"--node-name=a", "--log-format=xml"}, "--log-format"},
		{[]string{"--node-name=a", "--metrics-secure"}, "--metrics-secure needs --health-probe-bind-address"},
		{[]string{"--simulate-testbed-nodes", "--nvml=real"}, "conflicts with --simulate-testbed-nodes"},
		{[]string{"--simulate-testbed-nodes", "--node-name=a"}, "--node-name conflicts"},
		{[]string{"--node-name=a", "extra"}, `unexpected argument "extra"`},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"inventory", "-o", "xml"}, `-o="xml": want json, yaml, table or resourceslice`},
		{[]string{"--node-name=a", "--metrics-format=prometheus"}, `--metrics-format="prometheus": want gpulab, dcgm or both`},
		{[]string{"--node-name=a", "--device-plugin", "--advertise-capacity"}, "--advertise-capacity conflicts with --device-plugin"},
		{[]string{"--simulate-testbed-nodes", "--device-plugin"}, "--device-plugin conflicts with --simulate-testbed-nodes"},
		{[]string{"--node-name=a", "--dra-driver=gpu.gpulab.io", "--device-plugin"}, "--dra-driver conflicts with --device-plugin"},
		{[]string{"--node-name=a", "--dra-driver=gpu.gpulab.io", "--advertise-capacity"}, "--dra-driver conflicts with --advertise-capacity"},
		{[]string{"--node-name=a", "--dra-driver=gpu.gpulab.io", "--dra-cdi-dir="}, "--dra-driver needs --dra-cdi-dir"},
		{[]string{"--simulate-testbed-nodes", "--dra-driver=gpu"}, "want a DNS subdomain"},
		{[]string{"--node-name=a", "--device-plugin", "--device-plugin-dir="}, "--device-plugin needs --device-plugin-dir"},
		{[]string{"--node-name=a", "--device-plugin", "--device-plugin-resource=gpu"}, `--device-plugin-resource="gpu": want an extended resource name`},
		{[]string{"--node-name=a", "--device-plugin", "--device-list-strategy=envvar,volume-mounts"}, "--device-list-strategy: device list strategies envvar and volume-mounts both set"},
		{[]string{"--node-name=a", "--device-plugin", "--device-list-strategy=cdi"}, `--device-list-strategy: device list strategy "cdi"`},
		{[]string{"--node-name=a", "--device-plugin", "--cdi-kind=gpu"}, `--cdi-kind: CDI kind "gpu": want vendor/class`},
		{[]string{"--node-name=a", "--nvml=mock:dgx-h100", "--cdi-spec-dir=/tmp/x"}, "--cdi-spec-dir needs --device-plugin or --dra-driver"},
		{[]string{"--node-name=a", "--device-plugin", "--cdi-spec-dir=/tmp/x"}, "--cdi-spec-dir writes device nodes of mock GPUs and needs --nvml=mock:<profile>"},
	} {
		code, _, stderr := run(tc.args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, stderr, cli.ExitUsage, tc.want)
		}
	}
}

func TestNoDriver(t *testing.T) {
	if hasDriver() {
		t.Skip("this machine has an NVIDIA driver")
	}
	code, stdout, stderr := run("inventory")
	if code != cli.ExitNoDriver || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "no NVIDIA driver: libnvidia-ml.so.1 could not be loaded") {
		t.Errorf("inventory without a driver: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// The agent itself, pointed at an API server that is never reached.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = run("--node-name=n", "--kubeconfig="+kubeconfig, "--metrics-bind-address=0")
	if code != cli.ExitNoDriver || !strings.Contains(stderr, "gpulab-agent: no NVIDIA driver") {
		t.Errorf("agent without a driver: exit %d, stderr %q", code, stderr)
	}

	code, stdout, stderr = run("inventory", "--allow-no-gpu", "-o", "json", "--node-name=n")
	var inv v1alpha1.GPUInventory
	if err := json.Unmarshal([]byte(stdout), &inv); code != cli.ExitOK || err != nil || len(inv.Status.GPUs) != 0 || inv.Name != "n" {
		t.Errorf("--allow-no-gpu: exit %d, %v, stdout %q, stderr %q", code, err, stdout, stderr)
	}
}

// TestDevicePluginNeedsItsDirectory: without the kubelet's directory (a
// DaemonSet that lacks the host mount) the agent says so at start.
func TestDevicePluginNeedsItsDirectory(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "device-plugins")
	code, _, stderr := run("--node-name=n", "--nvml=mock:dgx-h100", "--kubeconfig="+kubeconfig, "--metrics-bind-address=0",
		"--device-plugin", "--device-plugin-dir="+dir)
	if code != cli.ExitError || !strings.Contains(stderr, "--device-plugin-dir") || !strings.Contains(stderr, "mount the kubelet's device-plugin directory") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func TestInventoryMock(t *testing.T) {
	inventory := func() v1alpha1.GPUInventory {
		t.Helper()
		code, stdout, stderr := run("inventory", "--nvml=mock:dgx-h200", "--node-name=gpu-1", "-o", "json")
		var inv v1alpha1.GPUInventory
		if err := json.Unmarshal([]byte(stdout), &inv); code != 0 || err != nil {
			t.Fatalf("exit %d, %v, stderr %q", code, err, stderr)
		}
		return inv
	}
	a, b := inventory(), inventory()
	if a.Kind != "GPUInventory" || a.APIVersion != "gpulab.io/v1alpha1" || a.Name != "gpu-1" {
		t.Errorf("object: %s %s %s", a.APIVersion, a.Kind, a.Name)
	}
	if s := a.Status.Summary; s.Count != 8 || s.Healthy != 8 || s.Product != "NVIDIA-H200" || s.MemoryMiB != 143771 {
		t.Errorf("summary: %+v", s)
	}
	for i := range a.Status.GPUs {
		if a.Status.GPUs[i].UUID != b.Status.GPUs[i].UUID {
			t.Errorf("GPU %d: UUID not stable across runs", i)
		}
	}
	for _, format := range []string{"yaml", "table"} {
		code, stdout, _ := run("inventory", "--nvml=mock:dgx-a100", "--node-name=gpu-1", "-o", format)
		if code != 0 || !strings.Contains(stdout, "NVIDIA A100-SXM4-40GB") {
			t.Errorf("-o %s: exit %d\n%s", format, code, stdout)
		}
	}

	// -o resourceslice: the node's pool, one healthy device per GPU.
	code, stdout, stderr := run("inventory", "--nvml=mock:dgx-h200", "--node-name=gpu-1", "-o", "resourceslice")
	var slice resourceapi.ResourceSlice
	if err := yaml.Unmarshal([]byte(stdout), &slice); code != 0 || err != nil {
		t.Fatalf("-o resourceslice: exit %d, %v, stderr %q", code, err, stderr)
	}
	if slice.Kind != "ResourceSlice" || slice.Spec.Driver != "gpu.gpulab.io" || slice.Spec.Pool.Name != "gpu-1" ||
		slice.Spec.NodeName == nil || *slice.Spec.NodeName != "gpu-1" || len(slice.Spec.Devices) != 8 {
		t.Fatalf("slice: %s driver %q pool %q devices %d", slice.Kind, slice.Spec.Driver, slice.Spec.Pool.Name, len(slice.Spec.Devices))
	}
	if uuid := slice.Spec.Devices[0].Attributes["uuid"].StringValue; uuid == nil || *uuid != a.Status.GPUs[0].UUID {
		t.Errorf("device 0 uuid %v, want %s", uuid, a.Status.GPUs[0].UUID)
	}
}
