package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// The node autoscalers a testbed can run (Options.Autoscaler).
const (
	// AutoscalerNone runs none: the fleet is all the nodes there are.
	AutoscalerNone = "none"
	// AutoscalerKarpenter runs Karpenter's kwok provider
	// (binaries.KarpenterVersion): a NodePool of the fleet's GPU profiles
	// whose nodes kwok runs and the agent simulates like the fleet's.
	AutoscalerKarpenter = "karpenter"
)

// DefaultAutoscalerMaxGPUs is the NodePool's nvidia.com/gpu limit when
// Options.AutoscalerMaxGPUs is zero: two 8-GPU nodes.
const DefaultAutoscalerMaxGPUs = 16

// ErrUnknownAutoscaler is returned for an Options.Autoscaler (or
// --autoscaler) that is not one of Autoscalers.
var ErrUnknownAutoscaler = errors.New("unknown autoscaler")

// Autoscalers lists the values Options.Autoscaler takes.
func Autoscalers() []string { return []string{AutoscalerNone, AutoscalerKarpenter} }

// ValidateAutoscaler accepts one of Autoscalers.
func ValidateAutoscaler(name string) error {
	if slices.Contains(Autoscalers(), name) {
		return nil
	}
	return fmt.Errorf("%w %q: want one of %s (the cluster-autoscaler module is refused by the Go module proxy, so the testbed cannot build it)",
		ErrUnknownAutoscaler, name, strings.Join(Autoscalers(), ", "))
}

// karpenterComponent is Karpenter's kwok provider as kwokctl names its pid
// and log files (the binary's name, which Restart checks a pid against).
const karpenterComponent = "karpenter-kwok"

// Names of what the testbed creates for Karpenter.
const (
	// KarpenterNodePool is the NodePool of the testbed's GPU nodes; the
	// nodes it adds carry karpenter.sh/nodepool=KarpenterNodePool.
	KarpenterNodePool = "gpulab-gpu"
	// karpenterNodeClass is the KWOKNodeClass the NodePool refers to.
	karpenterNodeClass = "gpulab"
	// KarpenterZone is the zone of every offering (and so the
	// topology.kubernetes.io/zone of every node Karpenter adds).
	KarpenterZone = "gpulab-local-a"
	// karpenterConsolidateAfter is how long a node Karpenter added may
	// stand empty (or underused) before it is removed: short, so a test
	// sees the scale-down (~48 s after its last pod goes).
	karpenterConsolidateAfter = 30 * time.Second
	// karpenterSystemNamespace is SYSTEM_NAMESPACE: v1.15.0 no longer
	// reads it, earlier releases put their state there.
	karpenterSystemNamespace = "kube-system"
	// karpenterCapacityType is the only capacity type the catalog offers.
	karpenterCapacityType = "on-demand"
)

// karpenterPrices are each profile's on-demand price per hour in the
// catalog (about a cloud's list price for the 8-GPU machine): Karpenter
// launches the cheapest instance type that fits, so the order matters, not
// the figures.
var karpenterPrices = map[string]float64{
	"dgx-a100": 32.77,
	"dgx-h100": 55.04,
	"dgx-h200": 84.80,
	"dgx-b200": 113.93,
}

// karpenterInstanceType is one entry of the kwok provider's
// INSTANCE_TYPES_FILE_PATH, the shape of the module's
// kwok/cloudprovider/instance_types.json.
type karpenterInstanceType struct {
	Name             string              `json:"name"`
	Offerings        []karpenterOffering `json:"offerings"`
	Architecture     string              `json:"architecture"`
	OperatingSystems []string            `json:"operatingSystems"`
	Resources        corev1.ResourceList `json:"resources"`
}

// karpenterOffering is one way to buy an instance type. The provider labels
// a node it launches with each single-valued requirement of the offering,
// so the testbed's profile labels ride here.
type karpenterOffering struct {
	Price        float64                          `json:"Price"`
	Available    bool                             `json:"Available"`
	Requirements []corev1.NodeSelectorRequirement `json:"Requirements"`
}

// karpenterInstanceTypes is the catalog: one instance type per profile,
// named after it, with the capacity of the profile's node (GPUs as
// nvidia.com/gpu), and one on-demand offering in KarpenterZone whose
// requirements are the profile's labels. A node Karpenter launches from it
// so carries gpulab.io/testbed-profile, which the agent simulator follows,
// and the same GPU Feature Discovery labels as the fleet's nodes of that
// profile.
func karpenterInstanceTypes() []karpenterInstanceType {
	out := make([]karpenterInstanceType, 0, len(Profiles))
	for _, name := range ProfileNames() {
		p := Profiles[name]
		node := p.Node(name)
		labels := p.Labels(name)
		// Karpenter sets these itself: the node's own name, and the
		// instance type's architecture and operating system.
		for _, own := range []string{corev1.LabelHostname, corev1.LabelArchStable, corev1.LabelOSStable} {
			delete(labels, own)
		}
		reqs := []corev1.NodeSelectorRequirement{
			{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{karpenterCapacityType}},
			{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{KarpenterZone}},
		}
		for _, key := range sortedKeys(labels) {
			reqs = append(reqs, corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{labels[key]}})
		}
		resources := corev1.ResourceList{}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage, GPUResource} {
			resources[r] = node.Status.Capacity[r]
		}
		out = append(out, karpenterInstanceType{
			Name:             name,
			Offerings:        []karpenterOffering{{Price: karpenterPrices[name], Available: true, Requirements: reqs}},
			Architecture:     "amd64",
			OperatingSystems: []string{"linux"},
			Resources:        resources,
		})
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// renderKarpenterCatalog renders karpenterInstanceTypes as the JSON the
// kwok provider reads.
func renderKarpenterCatalog() ([]byte, error) {
	return json.MarshalIndent(karpenterInstanceTypes(), "", "  ")
}

// karpenterNodeClassObject is the KWOKNodeClass the NodePool refers to; its
// nodes register at once (no nodeRegistrationDelay).
func karpenterNodeClassObject() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.kwok.sh/v1alpha1",
		"kind":       "KWOKNodeClass",
		"metadata":   map[string]any{"name": karpenterNodeClass},
		"spec":       map[string]any{},
	}}
}

// karpenterNodePoolObject renders the testbed's NodePool: instance types of
// the fleet's profiles only (so nodes it adds look like the fleet's; with a
// mixed fleet the cheapest that fits wins), on-demand, at most maxGPUs
// nvidia.com/gpu in all, and empty or underused nodes consolidated after
// karpenterConsolidateAfter.
func karpenterNodePoolObject(fleet Fleet, maxGPUs int) *unstructured.Unstructured {
	var types []any
	for _, e := range fleet {
		types = append(types, e.Profile.Name)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1",
		"kind":       "NodePool",
		"metadata":   map[string]any{"name": KarpenterNodePool},
		"spec": map[string]any{
			"template": map[string]any{
				"spec": map[string]any{
					"nodeClassRef": map[string]any{
						"group": "karpenter.kwok.sh",
						"kind":  "KWOKNodeClass",
						"name":  karpenterNodeClass,
					},
					"requirements": []any{
						map[string]any{"key": corev1.LabelInstanceTypeStable, "operator": string(corev1.NodeSelectorOpIn), "values": types},
						map[string]any{"key": "karpenter.sh/capacity-type", "operator": string(corev1.NodeSelectorOpIn), "values": []any{karpenterCapacityType}},
					},
				},
			},
			"limits": map[string]any{
				string(GPUResource): resource.NewQuantity(int64(maxGPUs), resource.DecimalSI).String(),
			},
			"disruption": map[string]any{
				"consolidationPolicy": "WhenEmptyOrUnderutilized",
				"consolidateAfter":    karpenterConsolidateAfter.String(),
			},
		},
	}}
}

// karpenterSetup runs Karpenter's kwok provider, when a testbed is started
// with Options.Autoscaler AutoscalerKarpenter.
type karpenterSetup struct {
	kubeconfig string
	ports      Ports
	// catalog is INSTANCE_TYPES_FILE_PATH, in the testbed's state folder.
	catalog string
	bin     *binaries.Karpenter
}

func newKarpenterSetup(stateDir, kubeconfig string, ports Ports, bin *binaries.Karpenter) *karpenterSetup {
	return &karpenterSetup{kubeconfig: kubeconfig, ports: ports, catalog: filepath.Join(stateDir, "karpenter-instance-types.json"), bin: bin}
}

// writeFiles writes the instance-type catalog the provider reads at start.
func (k *karpenterSetup) writeFiles() error {
	data, err := renderKarpenterCatalog()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(k.catalog), 0o755); err != nil {
		return err
	}
	return os.WriteFile(k.catalog, data, 0o644)
}

// component is the provider as a kwokctl component. One per testbed, so no
// leader election; metrics and health probes on the testbed's ports
// (Karpenter binds them on every interface, not only loopback).
func (k *karpenterSetup) component(workdir string) kwokComponent {
	return kwokComponent{
		Name:    karpenterComponent,
		Binary:  k.bin.Binary,
		WorkDir: workdir,
		Links:   []string{"kube-apiserver"},
		Args: []string{
			"--disable-leader-election",
			"--metrics-port=" + strconv.Itoa(k.ports.KarpenterMetrics),
			"--health-probe-port=" + strconv.Itoa(k.ports.KarpenterHealthz),
		},
		Envs: []kwokEnv{
			// kwokctl's own KUBECONFIG (the contexts file) would be
			// inherited otherwise.
			{Name: "KUBECONFIG", Value: k.kubeconfig},
			{Name: "SYSTEM_NAMESPACE", Value: karpenterSystemNamespace},
			{Name: "INSTANCE_TYPES_FILE_PATH", Value: k.catalog},
		},
	}
}

// karpenterCRDDirs hold NodePool, NodeClaim, NodeOverlay (and the
// CapacityBuffer CRD the chart ships beside them) and KWOKNodeClass, read
// from the module version that was built.
func karpenterCRDDirs(bin *binaries.Karpenter) []string {
	return []string{
		filepath.Join(bin.ModuleDir, "kwok", "charts", "crds"),
		filepath.Join(bin.ModuleDir, "kwok", "apis", "crds"),
	}
}

// applyKarpenterObjects creates the KWOKNodeClass and the NodePool.
func applyKarpenterObjects(ctx context.Context, c client.Client, fleet Fleet, maxGPUs int) error {
	for _, obj := range []*unstructured.Unstructured{karpenterNodeClassObject(), karpenterNodePoolObject(fleet, maxGPUs)} {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// startKarpenter installs Karpenter's CRDs, its KWOKNodeClass and NodePool,
// and starts the provider again: kwokctl started it with the API server,
// before its CRDs existed, and it reads its NodePools and instance types
// from a clean start (its first log is kept).
func (t *Testbed) startKarpenter(ctx context.Context, c client.Client, bins *binaries.Set, ports Ports, k *karpenterSetup) error {
	if err := installCRDs(ctx, c, karpenterCRDDirs(k.bin)...); err != nil {
		return fmt.Errorf("installing Karpenter CRDs: %w", err)
	}
	if err := applyKarpenterObjects(ctx, c, t.opts.Fleet, t.opts.AutoscalerMaxGPUs); err != nil {
		return err
	}
	return t.restartLocked(ctx, bins, ports, karpenterComponent)
}
