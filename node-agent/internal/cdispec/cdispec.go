// Package cdispec writes the Container Device Interface spec of a node's
// mock GPUs, so that the device plugin's cdi-annotations and cdi-cri
// strategies resolve on a testbed the way they do on a GPU node, where
// NVIDIA's container toolkit generates the spec (nvidia-ctk cdi generate).
//
// Each GPU is a CDI device named by its UUID, as in NVIDIA's spec, whose
// edits give the container one device node, /dev/nvidia<index>. A mock GPU
// has no device of its own, so the node is the host's /dev/null under that
// name: enough for a container to show exactly the GPUs it was allocated.
package cdispec

import (
	"fmt"
	"slices"
	"strconv"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// FileName is the spec's file in the spec folder.
const FileName = "gpulab-mock-gpus.json"

// GPU is one GPU of the spec.
type GPU struct {
	UUID  string
	Index int
}

// DeviceNode is the container path of a GPU's device node.
func DeviceNode(index int) string { return "/dev/nvidia" + strconv.Itoa(index) }

// Spec is the spec of gpus under kind (vendor/class), sorted by index.
func Spec(kind string, gpus []GPU) *specs.Spec {
	gpus = slices.Clone(gpus)
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	s := &specs.Spec{Version: specs.CurrentVersion, Kind: kind}
	for _, g := range gpus {
		s.Devices = append(s.Devices, specs.Device{
			Name: g.UUID,
			ContainerEdits: specs.ContainerEdits{
				DeviceNodes: []*specs.DeviceNode{{Path: DeviceNode(g.Index), HostPath: "/dev/null"}},
			},
		})
	}
	return s
}

// Writer writes the spec into one folder, again only when it changed.
type Writer struct {
	dir, kind string
	cache     *cdi.Cache
	last      *specs.Spec
}

// NewWriter writes specs of kind into dir (one the container runtime reads,
// /var/run/cdi by default for containerd).
func NewWriter(dir, kind string) (*Writer, error) {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI spec folder %s: %w", dir, err)
	}
	return &Writer{dir: dir, kind: kind, cache: c}, nil
}

// Write writes the spec of gpus, atomically (a rename), so that a runtime
// never reads half a spec. It is validated by the CDI library first.
func (w *Writer) Write(gpus []GPU) error {
	s := Spec(w.kind, gpus)
	if w.last != nil && specEqual(w.last, s) {
		return nil
	}
	if err := w.cache.WriteSpec(s, FileName); err != nil {
		return fmt.Errorf("writing the CDI spec of %d GPUs to %s: %w", len(gpus), w.dir, err)
	}
	w.last = s
	return nil
}

func specEqual(a, b *specs.Spec) bool {
	return slices.EqualFunc(a.Devices, b.Devices, func(x, y specs.Device) bool {
		return x.Name == y.Name && x.ContainerEdits.DeviceNodes[0].Path == y.ContainerEdits.DeviceNodes[0].Path
	})
}
