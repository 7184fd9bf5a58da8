package deviceplugin_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpulab/gpulab/node-agent/internal/cdispec"
	"github.com/gpulab/gpulab/node-agent/internal/deviceplugin"
)

// allocate asks a plugin of strategies for one container of the GPUs at
// the given indexes of devs.
func allocate(t *testing.T, strategies string, devs []deviceplugin.Device, indexes ...int) *pluginapi.ContainerAllocateResponse {
	t.Helper()
	st, err := deviceplugin.ParseStrategies(strategies)
	if err != nil {
		t.Fatal(err)
	}
	p, err := deviceplugin.New(deviceplugin.Options{Dir: t.TempDir(), Strategies: st})
	if err != nil {
		t.Fatal(err)
	}
	p.SetDevices(devs)
	ids := make([]string, len(indexes))
	for i, x := range indexes {
		ids[i] = devs[x].ID
	}
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetContainerResponses()[0]
}

func TestStrategiesHandOverExactlyTheAllocatedGPUs(t *testing.T) {
	devs := mockDevices(t, "dgx-h100")
	ids := []string{devs[5].ID, devs[2].ID}
	cdiNames := []string{"nvidia.com/gpu=" + ids[0], "nvidia.com/gpu=" + ids[1]}

	t.Run("envvar", func(t *testing.T) {
		r := allocate(t, "envvar", devs, 5, 2)
		if got := r.GetEnvs(); !maps.Equal(got, map[string]string{"NVIDIA_VISIBLE_DEVICES": ids[0] + "," + ids[1]}) {
			t.Errorf("envs %v", got)
		}
		if len(r.GetMounts())+len(r.GetAnnotations())+len(r.GetCdiDevices())+len(r.GetDevices()) != 0 {
			t.Errorf("envvar alone gave more than the variable: %v", r)
		}
	})
	t.Run("volume-mounts", func(t *testing.T) {
		r := allocate(t, "volume-mounts", devs, 5, 2)
		if got := r.GetEnvs(); !maps.Equal(got, map[string]string{"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}) {
			t.Errorf("envs %v: want the folder, not the UUIDs a pod could also set", got)
		}
		var mounts []string
		for _, m := range r.GetMounts() {
			if m.GetHostPath() != "/dev/null" || !m.GetReadOnly() {
				t.Errorf("mount %v: want /dev/null, read-only", m)
			}
			mounts = append(mounts, m.GetContainerPath())
		}
		if want := []string{"/var/run/nvidia-container-devices/" + ids[0], "/var/run/nvidia-container-devices/" + ids[1]}; !slices.Equal(mounts, want) {
			t.Errorf("mounts %v, want %v", mounts, want)
		}
	})
	t.Run("cdi-annotations", func(t *testing.T) {
		r := allocate(t, "cdi-annotations", devs, 5, 2)
		if len(r.GetEnvs()) != 0 || len(r.GetCdiDevices()) != 0 {
			t.Errorf("cdi-annotations alone set %v", r)
		}
		// Parsed back as the container runtime parses them.
		_, got, err := cdi.ParseAnnotations(r.GetAnnotations())
		if err != nil || !slices.Equal(got, cdiNames) {
			t.Errorf("CDI devices in annotations %v: %v, %v; want %v", r.GetAnnotations(), got, err, cdiNames)
		}
	})
	t.Run("cdi-cri", func(t *testing.T) {
		r := allocate(t, "cdi-cri", devs, 5, 2)
		var got []string
		for _, d := range r.GetCdiDevices() {
			got = append(got, d.GetName())
		}
		if !slices.Equal(got, cdiNames) || len(r.GetEnvs())+len(r.GetAnnotations()) != 0 {
			t.Errorf("cdi-cri: %v, want CDI devices %v only", r, cdiNames)
		}
	})
	t.Run("envvar,cdi-cri", func(t *testing.T) {
		r := allocate(t, "envvar,cdi-cri", devs, 5, 2)
		if r.GetEnvs()["NVIDIA_VISIBLE_DEVICES"] != ids[0]+","+ids[1] || len(r.GetCdiDevices()) != 2 {
			t.Errorf("both strategies: %v", r)
		}
	})
}

// TestCDIDevicesResolveToTheirDeviceNodes resolves the names Allocate hands
// out against the mock GPUs' written spec, with the CDI library container
// runtimes use, and checks the container gets exactly its GPUs' nodes.
func TestCDIDevicesResolveToTheirDeviceNodes(t *testing.T) {
	devs := mockDevices(t, "dgx-h100")
	dir := t.TempDir()
	w, err := cdispec.NewWriter(dir, deviceplugin.DefaultCDIKind)
	if err != nil {
		t.Fatal(err)
	}
	var gpus []cdispec.GPU
	for i, d := range devs {
		gpus = append(gpus, cdispec.GPU{UUID: d.ID, Index: i})
	}
	if err := w.Write(gpus); err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("the written spec does not load: %v", errs)
	}
	if got := len(cache.ListDevices()); got != len(devs) {
		t.Fatalf("the spec has %d devices, want %d", got, len(devs))
	}
	for _, strategies := range []string{"cdi-cri", "cdi-annotations"} {
		r := allocate(t, strategies, devs, 7, 0, 3)
		names := []string{}
		for _, d := range r.GetCdiDevices() {
			names = append(names, d.GetName())
		}
		if _, annotated, err := cdi.ParseAnnotations(r.GetAnnotations()); err == nil {
			names = append(names, annotated...)
		}
		spec := &oci.Spec{Linux: &oci.Linux{}}
		if unresolved, err := cache.InjectDevices(spec, names...); err != nil {
			t.Fatalf("%s: injecting %v: %v (unresolved %v)", strategies, names, err, unresolved)
		}
		var nodes []string
		for _, d := range spec.Linux.Devices {
			nodes = append(nodes, d.Path)
		}
		slices.Sort(nodes)
		if want := []string{"/dev/nvidia0", "/dev/nvidia3", "/dev/nvidia7"}; !slices.Equal(nodes, want) {
			t.Errorf("%s: container device nodes %v, want %v", strategies, nodes, want)
		}
	}
}

func TestParseStrategiesRefusesBadLists(t *testing.T) {
	for in, want := range map[string]string{
		"":                      `strategy ""`,
		"env":                   `strategy "env": want a comma-separated list of envvar, volume-mounts, cdi-annotations, cdi-cri`,
		"cdi-cri,cdi-cri":       "given twice",
		"envvar,volume-mounts":  "choose one",
		"cdi-cri,,envvar":       `strategy ""`,
		"volume-mounts,cdi-cri": "",
	} {
		_, err := deviceplugin.ParseStrategies(in)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("ParseStrategies(%q) = %v, want %q", in, err, want)
		}
	}
	for _, kind := range []string{"gpu", "nvidia.com/", "nvidia.com/gpu/x", "-x.com/gpu"} {
		if _, err := deviceplugin.New(deviceplugin.Options{CDIKind: kind}); err == nil {
			t.Errorf("CDI kind %q accepted", kind)
		}
	}
}
