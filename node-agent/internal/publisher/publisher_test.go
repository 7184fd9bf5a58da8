package publisher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

func counter(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	_ = (<-ch).Write(&m)
	if m.GetHistogram() != nil {
		return float64(m.GetHistogram().GetSampleCount())
	}
	return m.GetCounter().GetValue()
}

// TestAgentPublishes runs an agent on a mock DGX H100 against the API server:
// it creates the GPUInventory and labels, writes nothing when a rescan finds
// nothing new, and updates exactly what an XID changed.
func TestAgentPublishes(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "agent-node", map[string]string{"kubernetes.io/hostname": "agent-node"})
	b, err := mock.New("dgx-h100", node.Name, nvml.Options{EventWaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry(), metrics.Options{})
	pub := publisher.New(admin, publisher.Options{LabelNode: true, Metrics: m})
	a, err := agent.New(b, agent.Options{NodeName: node.Name, Interval: time.Hour, Publisher: pub, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	var inv v1alpha1.GPUInventory
	get := func() bool { return e.Client.Get(ctx(t), client.ObjectKey{Name: node.Name}, &inv) == nil }
	// The inventory is written before the labels, so wait for both.
	eventually(t, "the GPUInventory and the node labels", func() bool {
		return get() && counter(m.Writes.WithLabelValues(publisher.ObjectLabels)) >= 1
	})
	if s := inv.Status.Summary; s != (v1alpha1.InventorySummary{Count: 8, Healthy: 8, Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559}) {
		t.Errorf("summary: %+v", s)
	}
	if inv.Status.DriverVersion != "570.172.08" || inv.Status.CUDADriverVersion != "12.8" || len(inv.Status.GPUs) != 8 {
		t.Errorf("status: %+v", inv.Status)
	}
	if c := inv.Status.Conditions; len(c) != 1 || c[0].Type != "Ready" || c[0].Status != metav1.ConditionTrue || c[0].Reason != v1alpha1.ReasonScanSucceeded {
		t.Errorf("conditions: %+v", c)
	}
	if o := inv.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].UID != node.UID {
		t.Errorf("owner references: %+v", o)
	}
	managers := map[string]bool{}
	for _, f := range inv.ManagedFields {
		managers[f.Manager] = true
	}
	if !managers[publisher.DefaultFieldManager] || len(managers) != 1 {
		t.Errorf("field managers: %v", managers)
	}
	var n corev1.Node
	if err := e.Client.Get(ctx(t), client.ObjectKey{Name: node.Name}, &n); err != nil {
		t.Fatal(err)
	}
	if n.Labels["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" || n.Labels["nvidia.com/gpu.count"] != "8" ||
		n.Labels["nvidia.com/gpu.family"] != "hopper" || n.Labels["kubernetes.io/hostname"] != node.Name {
		t.Errorf("node labels: %v", n.Labels)
	}

	// A rescan that finds nothing new writes nothing.
	rv := inv.ResourceVersion
	scans := counter(m.ScanDuration)
	a.Rescan()
	eventually(t, "the rescan", func() bool { return counter(m.ScanDuration) > scans })
	if w := counter(m.Writes.WithLabelValues(publisher.ObjectInventory)); w != 1 {
		t.Errorf("inventory writes after an idle rescan: %v, want 1", w)
	}
	if get(); inv.ResourceVersion != rv {
		t.Errorf("an idle rescan changed the GPUInventory (resourceVersion %s → %s)", rv, inv.ResourceVersion)
	}

	if err := b.InjectXID(6, 94); err != nil {
		t.Fatal(err)
	}
	eventually(t, "GPU 6 to be Unhealthy", func() bool { return get() && inv.Status.Summary.Healthy == 7 })
	for i, g := range inv.Status.GPUs {
		if unhealthy := g.Health.State == v1alpha1.GPUUnhealthy; unhealthy != (i == 6) {
			t.Errorf("GPU %d: %+v", i, g.Health)
		}
	}
	if x := inv.Status.GPUs[6].Health.LastXID; x == nil || *x != 94 {
		t.Errorf("GPU 6 last XID: %v", x)
	}
	if w := counter(m.Writes.WithLabelValues(publisher.ObjectLabels)); w != 1 {
		t.Errorf("label writes: %v, want 1 (the labels did not change)", w)
	}
}

func TestLabelsAndCapacity(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "label-node", map[string]string{"team": "ml"})
	p := publisher.New(admin, publisher.Options{LabelNode: true, AdvertiseCapacity: true})
	st := publisher.State{Labels: map[string]string{"nvidia.com/gpu.count": "8", "nvidia.com/mig.capable": "true"}, Healthy: 8}
	if err := p.Publish(ctx(t), node.Name, st); err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	read := func() {
		t.Helper()
		if err := e.Client.Get(ctx(t), client.ObjectKey{Name: node.Name}, &n); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if q := n.Status.Capacity[gfd.GPUResource]; !q.Equal(resource.MustParse("8")) {
		t.Errorf("capacity: %v", n.Status.Capacity)
	}
	// A label the agent no longer produces goes; others' labels stay.
	st = publisher.State{Labels: map[string]string{"nvidia.com/gpu.count": "8"}, Healthy: 7}
	if err := p.Publish(ctx(t), node.Name, st); err != nil {
		t.Fatal(err)
	}
	read()
	if _, ok := n.Labels["nvidia.com/mig.capable"]; ok || n.Labels["team"] != "ml" || n.Labels["nvidia.com/gpu.count"] != "8" {
		t.Errorf("labels: %v", n.Labels)
	}
	if q := n.Status.Allocatable[gfd.GPUResource]; !q.Equal(resource.MustParse("7")) {
		t.Errorf("allocatable: %v", n.Status.Allocatable)
	}
}

func TestPublishForMissingNodeFails(t *testing.T) {
	needEnv(t)
	p := publisher.New(admin, publisher.Options{LabelNode: true})
	if err := p.Publish(ctx(t), "no-such-node", publisher.State{}); err == nil {
		t.Fatal("publishing for a node that does not exist must fail, not create it")
	}
}

// TestResync: within the resync period an unchanged state is not written,
// even when the object was deleted behind the agent's back; once the period
// has passed it is applied again, and the inventory comes back.
func TestResync(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "resync-node", nil)
	st := publisher.State{Status: v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08"}}
	inv := &v1alpha1.GPUInventory{}
	exists := func() bool { return e.Client.Get(ctx(t), client.ObjectKey{Name: node.Name}, inv) == nil }
	for _, tc := range []struct {
		resync time.Duration
		back   bool
	}{{time.Hour, false}, {time.Nanosecond, true}} {
		p := publisher.New(admin, publisher.Options{ResyncPeriod: tc.resync})
		if err := p.Publish(ctx(t), node.Name, st); err != nil || !exists() {
			t.Fatalf("first publish: %v", err)
		}
		if err := e.Client.Delete(ctx(t), inv); err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(ctx(t), node.Name, st); err != nil {
			t.Fatal(err)
		}
		if exists() != tc.back {
			t.Errorf("resync period %s: inventory recreated = %v, want %v", tc.resync, !tc.back, tc.back)
		}
	}
}

// TestHeartbeat: every write carries heartbeatTime and the promised
// interval; an unchanged status is written again once a heartbeat is due,
// and not before.
func TestHeartbeat(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "heartbeat-node", nil)
	st := publisher.State{Status: v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08"}}
	read := func() *v1alpha1.GPUInventory {
		inv := &v1alpha1.GPUInventory{}
		if err := e.Client.Get(ctx(t), client.ObjectKey{Name: node.Name}, inv); err != nil {
			t.Fatal(err)
		}
		return inv
	}

	slow := publisher.New(admin, publisher.Options{HeartbeatPeriod: time.Hour})
	if err := slow.Publish(ctx(t), node.Name, st); err != nil {
		t.Fatal(err)
	}
	first := read()
	if first.Status.HeartbeatTime == nil || first.Status.HeartbeatSeconds != 3600 {
		t.Fatalf("heartbeat %v every %ds, want a time every 3600s", first.Status.HeartbeatTime, first.Status.HeartbeatSeconds)
	}
	if err := slow.Publish(ctx(t), node.Name, st); err != nil {
		t.Fatal(err)
	}
	if again := read(); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("an unchanged status was written again before its heartbeat was due")
	}

	fast := publisher.New(admin, publisher.Options{HeartbeatPeriod: time.Second})
	if err := fast.Publish(ctx(t), node.Name, st); err != nil {
		t.Fatal(err)
	}
	beat := read().Status.HeartbeatTime
	if err := poll.Until(ctx(t), 10*time.Second, func() (bool, string) {
		if err := fast.Publish(ctx(t), node.Name, st); err != nil {
			return false, err.Error()
		}
		now := read().Status
		return now.HeartbeatTime.After(beat.Time) && now.HeartbeatSeconds == 1, fmt.Sprintf("heartbeat still %v", now.HeartbeatTime)
	}); err != nil {
		t.Fatalf("no heartbeat of an unchanged status: %v", err)
	}
}
