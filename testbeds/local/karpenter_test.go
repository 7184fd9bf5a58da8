package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/poll/polltest"
	"github.com/gpulab/gpulab/internal/testbin"
	"github.com/gpulab/gpulab/testbeds/binaries"
)

func TestValidateAutoscaler(t *testing.T) {
	for _, ok := range []string{AutoscalerNone, AutoscalerKarpenter} {
		if err := ValidateAutoscaler(ok); err != nil {
			t.Errorf("ValidateAutoscaler(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "cluster-autoscaler", "Karpenter"} {
		if err := ValidateAutoscaler(bad); !errors.Is(err, ErrUnknownAutoscaler) {
			t.Errorf("ValidateAutoscaler(%q) = %v, want ErrUnknownAutoscaler", bad, err)
		}
	}
	tb, err := New(Options{Name: "autoscaler-default", CacheDir: t.TempDir(), CRDDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if tb.opts.Autoscaler != AutoscalerNone || tb.opts.AutoscalerMaxGPUs != DefaultAutoscalerMaxGPUs {
		t.Errorf("defaults: autoscaler %q, max GPUs %d; want %q, %d", tb.opts.Autoscaler, tb.opts.AutoscalerMaxGPUs, AutoscalerNone, DefaultAutoscalerMaxGPUs)
	}
	if _, err := New(Options{Name: "autoscaler-bad", CacheDir: t.TempDir(), CRDDir: t.TempDir(), Autoscaler: "cluster-autoscaler"}); !errors.Is(err, ErrUnknownAutoscaler) {
		t.Errorf("New with autoscaler cluster-autoscaler: %v, want ErrUnknownAutoscaler", err)
	}
	if _, err := New(Options{Name: "autoscaler-neg", CacheDir: t.TempDir(), CRDDir: t.TempDir(), Autoscaler: AutoscalerKarpenter, AutoscalerMaxGPUs: -8}); err == nil {
		t.Error("New with a negative GPU limit: no error")
	}
}

// TestKarpenterNodePoolAndCatalog checks what the testbed gives Karpenter:
// a NodePool of the fleet's profiles capped in GPUs, and a catalog with an
// instance type per profile whose offering carries the profile's labels.
func TestKarpenterNodePoolAndCatalog(t *testing.T) {
	fleet, err := ParseFleet("dgx-h100=2,dgx-a100=1")
	if err != nil {
		t.Fatal(err)
	}
	np := karpenterNodePoolObject(fleet, 24)
	if np.GetAPIVersion() != "karpenter.sh/v1" || np.GetKind() != "NodePool" || np.GetName() != KarpenterNodePool {
		t.Errorf("NodePool is %s %s %s", np.GetAPIVersion(), np.GetKind(), np.GetName())
	}
	str := func(fields ...string) string {
		t.Helper()
		v, found, err := unstructured.NestedString(np.Object, fields...)
		if err != nil || !found {
			t.Fatalf("NodePool has no %v: %v", fields, err)
		}
		return v
	}
	if got := str("spec", "limits", "nvidia.com/gpu"); got != "24" {
		t.Errorf("limits nvidia.com/gpu = %q, want 24", got)
	}
	if got := str("spec", "disruption", "consolidateAfter"); got != "30s" {
		t.Errorf("consolidateAfter = %q, want 30s", got)
	}
	if got := str("spec", "disruption", "consolidationPolicy"); got != "WhenEmptyOrUnderutilized" {
		t.Errorf("consolidationPolicy = %q", got)
	}
	if g, k, n := str("spec", "template", "spec", "nodeClassRef", "group"), str("spec", "template", "spec", "nodeClassRef", "kind"),
		str("spec", "template", "spec", "nodeClassRef", "name"); g != "karpenter.kwok.sh" || k != "KWOKNodeClass" || n != karpenterNodeClassObject().GetName() {
		t.Errorf("nodeClassRef = %s/%s %s, want karpenter.kwok.sh/KWOKNodeClass %s", g, k, n, karpenterNodeClassObject().GetName())
	}
	// Round-trip through JSON, as the API server gets it.
	data, err := json.Marshal(np.Object)
	if err != nil {
		t.Fatal(err)
	}
	var typed struct {
		Spec struct {
			Template struct {
				Spec struct {
					Requirements []corev1.NodeSelectorRequirement `json:"requirements"`
				} `json:"spec"`
			} `json:"template"`
			Limits corev1.ResourceList `json:"limits"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(data, &typed); err != nil {
		t.Fatal(err)
	}
	if q := typed.Spec.Limits[GPUResource]; q.Value() != 24 {
		t.Errorf("limit %s, want 24", q.String())
	}
	var types []string
	for _, r := range typed.Spec.Template.Spec.Requirements {
		if r.Key == corev1.LabelInstanceTypeStable && r.Operator == corev1.NodeSelectorOpIn {
			types = r.Values
		}
	}
	if !slices.Equal(types, []string{"dgx-h100", "dgx-a100"}) {
		t.Errorf("instance types %v, want the fleet's profiles [dgx-h100 dgx-a100]", types)
	}

	raw, err := renderKarpenterCatalog()
	if err != nil {
		t.Fatal(err)
	}
	var catalog []karpenterInstanceType
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&catalog); err != nil {
		t.Fatalf("catalog: %v", err)
	}
	if len(catalog) != len(Profiles) {
		t.Fatalf("catalog has %d instance types, want one per profile (%d)", len(catalog), len(Profiles))
	}
	prices := map[string]float64{}
	for _, it := range catalog {
		p, ok := Profiles[it.Name]
		if !ok {
			t.Errorf("instance type %q is no profile", it.Name)
			continue
		}
		gpus := it.Resources[GPUResource]
		cpu := it.Resources[corev1.ResourceCPU]
		if gpus.Value() != int64(p.GPUs) || cpu.Cmp(resource.MustParse(p.CPU)) != 0 {
			t.Errorf("%s: nvidia.com/gpu %s, cpu %s; want %d, %s", it.Name, gpus.String(), cpu.String(), p.GPUs, p.CPU)
		}
		if it.Architecture != "amd64" || !slices.Equal(it.OperatingSystems, []string{"linux"}) {
			t.Errorf("%s: %s %v, want amd64 [linux]", it.Name, it.Architecture, it.OperatingSystems)
		}
		if len(it.Offerings) != 1 || !it.Offerings[0].Available || it.Offerings[0].Price <= 0 {
			t.Fatalf("%s: offerings %+v, want one available with a price", it.Name, it.Offerings)
		}
		prices[it.Name] = it.Offerings[0].Price
		labels := map[string]string{}
		for _, r := range it.Offerings[0].Requirements {
			// The provider labels a node only with single-valued In
			// requirements.
			if r.Operator != corev1.NodeSelectorOpIn || len(r.Values) != 1 {
				t.Errorf("%s: requirement %+v is not a single-valued In", it.Name, r)
				continue
			}
			labels[r.Key] = r.Values[0]
		}
		want := p.Labels("ignored")
		delete(want, corev1.LabelHostname)
		delete(want, corev1.LabelArchStable)
		delete(want, corev1.LabelOSStable)
		want["karpenter.sh/capacity-type"] = "on-demand"
		want[corev1.LabelTopologyZone] = KarpenterZone
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("%s: offering label %s=%q, want %q", it.Name, k, labels[k], v)
			}
		}
		if labels["gpulab.io/testbed-profile"] != it.Name {
			t.Errorf("%s: profile label %q: the agent simulator would not follow its nodes", it.Name, labels["gpulab.io/testbed-profile"])
		}
	}
	// Cheapest first by generation: a pod that fits several gets the oldest.
	if !(prices["dgx-a100"] < prices["dgx-h100"] && prices["dgx-h100"] < prices["dgx-h200"] && prices["dgx-h200"] < prices["dgx-b200"]) {
		t.Errorf("prices %v, want a100 < h100 < h200 < b200", prices)
	}

	// The catalog's fields are the module's: its own instance_types.json
	// decodes into the same struct with nothing left over.
	if bin, err := binaries.LookupKarpenter(t.Context(), binaries.Options{}); err == nil {
		upstream, err := os.ReadFile(filepath.Join(bin.ModuleDir, "kwok", "cloudprovider", "instance_types.json"))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(upstream))
		dec.DisallowUnknownFields()
		var theirs []karpenterInstanceType
		if err := dec.Decode(&theirs); err != nil {
			t.Errorf("the module's instance_types.json does not decode into the testbed's catalog type: %v", err)
		}
	} else {
		t.Logf("not comparing with the module's catalog: %v", err)
	}
}

// TestKarpenterAddsGPUNodes runs Karpenter's kwok provider on a testbed of
// one 8-GPU node (GPUs also published through DRA): with that node taken,
// one pending 8-GPU pod makes Karpenter add a node of the fleet's profile,
// which kwok runs and the agent simulator publishes like the fleet's
// (GPUInventory and ResourceSlice); once the pod is gone the node is
// consolidated away and what the agent published goes with it.
func TestKarpenterAddsGPUNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up the local testbed; skipped with -short")
	}
	testbin.SkipUnlessLong(t)
	t.Parallel()
	if _, err := binaries.LookupKarpenter(t.Context(), binaries.Options{}); err != nil {
		t.Skipf("Karpenter's kwok provider is not built (make testbed-binaries-karpenter): %v", err)
	}
	start := time.Now()
	fleet, err := ParseFleet("dgx-h100=1")
	if err != nil {
		t.Fatal(err)
	}
	tb := startForTest(t, Options{Name: "gpulab-karpenter", Fleet: fleet, Log: testLog{t}, Autoscaler: AutoscalerKarpenter, DRA: true})
	t.Logf("testbed with Karpenter up in %s", time.Since(start).Round(100*time.Millisecond))
	ctx := t.Context()
	c, err := tb.Client()
	if err != nil {
		t.Fatal(err)
	}
	componentPID(t, tb, karpenterComponent)
	status, err := tb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.Autoscaler != AutoscalerKarpenter || status.Ports.KarpenterHealthz == 0 {
		t.Errorf("status: autoscaler %q, healthz port %d", status.Autoscaler, status.Ports.KarpenterHealthz)
	}
	if got := tb.Versions().Karpenter; got != binaries.KarpenterVersion {
		t.Errorf("Versions().Karpenter = %q, want %s", got, binaries.KarpenterVersion)
	}
	ns := createNamespace(t, c, "karpenter")

	// Take the fleet's only node, so the next pod has nowhere to go.
	filler := gpuPod(ns, "filler", 8)
	if err := c.Create(ctx, filler); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	polltest.Eventually(t, time.Minute, "the filler pod to run on the fleet's node", func() bool {
		return podRunning(ctx, c, filler) && filler.Spec.NodeName == "dgx-h100-0"
	})

	pending := gpuPod(ns, "pending", 8)
	created := time.Now()
	if err := c.Create(ctx, pending); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	var node corev1.Node
	polltest.Eventually(t, 90*time.Second, "the pending pod to run on a node Karpenter added", func() bool {
		if !podRunning(ctx, c, pending) || pending.Spec.NodeName == "" {
			return false
		}
		return c.Get(ctx, client.ObjectKey{Name: pending.Spec.NodeName}, &node) == nil
	})
	scaledUp := time.Since(created)
	t.Logf("pending pod running on %s %s after its creation", node.Name, scaledUp.Round(100*time.Millisecond))

	for key, want := range map[string]string{
		"karpenter.sh/nodepool":             KarpenterNodePool,
		corev1.LabelInstanceTypeStable:      "dgx-h100",
		"gpulab.io/testbed-profile":         "dgx-h100",
		"nvidia.com/gpu.product":            Profiles["dgx-h100"].Product,
		"karpenter.kwok.sh/instance-family": "dgx",
		corev1.LabelTopologyZone:            KarpenterZone,
	} {
		if got := node.Labels[key]; got != want {
			t.Errorf("node %s: label %s=%q, want %q", node.Name, key, got, want)
		}
	}
	if node.Annotations[kwokNodeAnnotation] != "fake" {
		t.Errorf("node %s: annotation %s=%q: kwok would not run it", node.Name, kwokNodeAnnotation, node.Annotations[kwokNodeAnnotation])
	}
	if !nodeReady(&node) {
		t.Errorf("node %s is not Ready: %+v", node.Name, node.Status.Conditions)
	}
	if q := node.Status.Allocatable[GPUResource]; q.Value() != 8 {
		t.Errorf("node %s: allocatable nvidia.com/gpu %s, want 8", node.Name, q.String())
	}
	var inv gpulabv1alpha1.GPUInventory
	polltest.Eventually(t, time.Minute, "the agent simulator to publish the new node's GPUInventory", func() bool {
		return c.Get(ctx, client.ObjectKey{Name: node.Name}, &inv) == nil && inv.Status.Summary.Count == 8
	})
	t.Logf("GPUInventory of %s published %s after the pod's creation", node.Name, time.Since(created).Round(100*time.Millisecond))
	polltest.Eventually(t, time.Minute, "the agent simulator to publish the new node's ResourceSlice of 8 GPUs", func() bool {
		return nodeDevices(ctx, c, node.Name) == 8
	})

	// Scale-down: Karpenter removes the empty node after consolidateAfter,
	// and the inventory the agent published for it goes with it.
	deleted := time.Now()
	if err := c.Delete(ctx, pending, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	polltest.Eventually(t, 2*time.Minute, "Karpenter to remove the empty node and its GPUInventory to go", func() bool {
		nodeErr := c.Get(ctx, client.ObjectKey{Name: node.Name}, &corev1.Node{})
		invErr := c.Get(ctx, client.ObjectKey{Name: node.Name}, &gpulabv1alpha1.GPUInventory{})
		return apierrors.IsNotFound(nodeErr) && apierrors.IsNotFound(invErr) && nodeDevices(ctx, c, node.Name) == 0
	})
	t.Logf("node %s, its GPUInventory and its ResourceSlices gone %s after the pod's deletion", node.Name, time.Since(deleted).Round(100*time.Millisecond))
	var fleetNode corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: "dgx-h100-0"}, &fleetNode); err != nil {
		t.Errorf("the fleet's node: %v", err)
	}
}

// gpuPod is a pod for the default scheduler asking for gpus whole GPUs.
func gpuPod(ns, name string, gpus int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "main",
				Image: "busybox",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					Limits:   corev1.ResourceList{GPUResource: *resource.NewQuantity(int64(gpus), resource.DecimalSI)},
				},
			}},
		},
	}
}

// nodeDevices counts the devices of the ResourceSlices on the node (-1 when
// they cannot be listed).
func nodeDevices(ctx context.Context, c client.Client, node string) int {
	var list resourcev1.ResourceSliceList
	if err := c.List(ctx, &list); err != nil {
		return -1
	}
	n := 0
	for _, s := range list.Items {
		if s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			n += len(s.Spec.Devices)
		}
	}
	return n
}

// podRunning refreshes pod and says whether it runs.
func podRunning(ctx context.Context, c client.Client, pod *corev1.Pod) bool {
	return c.Get(ctx, client.ObjectKeyFromObject(pod), pod) == nil && pod.Status.Phase == corev1.PodRunning
}
