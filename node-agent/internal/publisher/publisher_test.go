package publisher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestHeartbeatLease: an inventory write carries heartbeatTime and the
// promised period; an unchanged status is not written again, and the
// heartbeat is the node's Lease instead, created once a period has passed
// and renewed every period after, owned by the node. A Lease that someone
// deleted comes back.
func TestHeartbeatLease(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "heartbeat-node", nil)
	ns := createNamespace(t, e.Client, "heartbeat-leases")
	st := publisher.State{Status: v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08"}}
	read := func() *v1alpha1.GPUInventory {
		inv := &v1alpha1.GPUInventory{}
		if err := e.Client.Get(ctx(t), client.ObjectKey{Name: node.Name}, inv); err != nil {
			t.Fatal(err)
		}
		return inv
	}
	lease := func() (*coordinationv1.Lease, error) {
		l := &coordinationv1.Lease{}
		return l, e.Client.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: node.Name}, l)
	}

	p := publisher.New(admin, publisher.Options{HeartbeatPeriod: time.Second, LeaseNamespace: ns})
	if err := p.Publish(ctx(t), node.Name, st); err != nil {
		t.Fatal(err)
	}
	first := read()
	if first.Status.HeartbeatTime == nil || first.Status.HeartbeatSeconds != 1 {
		t.Fatalf("heartbeat %v every %ds, want a time every 1s", first.Status.HeartbeatTime, first.Status.HeartbeatSeconds)
	}
	if _, err := lease(); !apierrors.IsNotFound(err) {
		t.Errorf("a Lease right after the inventory was written (%v): the write is the heartbeat", err)
	}

	// Renewed twice, with the inventory untouched.
	var renewals []time.Time
	if err := poll.Until(ctx(t), 15*time.Second, func() (bool, string) {
		if err := p.Publish(ctx(t), node.Name, st); err != nil {
			return false, err.Error()
		}
		l, err := lease()
		if err != nil {
			return false, err.Error()
		}
		if at := l.Spec.RenewTime.Time; len(renewals) == 0 || at.After(renewals[len(renewals)-1]) {
			renewals = append(renewals, at)
		}
		return len(renewals) >= 2, fmt.Sprintf("renewals %v", renewals)
	}); err != nil {
		t.Fatalf("no renewed Lease: %v", err)
	}
	if again := read(); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("an unchanged status was written again: the Lease is the heartbeat")
	}
	l, err := lease()
	if err != nil {
		t.Fatal(err)
	}
	owner := metav1.GetControllerOfNoCopy(l)
	if refs := l.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != node.UID || owner != nil {
		t.Errorf("owners %+v, want the node %s (not as controller)", refs, node.UID)
	}
	if l.Labels[v1alpha1.HeartbeatLeaseLabel] != "true" || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != node.Name ||
		l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != v1alpha1.StaleHeartbeats {
		t.Errorf("Lease labels %v, spec %+v: want %s=true, held by %s for %d s", l.Labels, l.Spec, v1alpha1.HeartbeatLeaseLabel, node.Name, v1alpha1.StaleHeartbeats)
	}

	if err := e.Client.Delete(ctx(t), l); err != nil {
		t.Fatal(err)
	}
	if err := poll.Until(ctx(t), 15*time.Second, func() (bool, string) {
		err := p.Publish(ctx(t), node.Name, st)
		_, gerr := lease()
		return err == nil && gerr == nil, fmt.Sprintf("publish: %v; lease: %v", err, gerr)
	}); err != nil {
		t.Fatalf("a deleted Lease did not come back: %v", err)
	}
}

// TestForeignLeaseIsLeftAlone: a Lease named after the node without the
// heartbeat label is someone else's; the agent says so and renews nothing.
func TestForeignLeaseIsLeftAlone(t *testing.T) {
	e := needEnv(t)
	node := createNode(t, e.Client, "foreign-lease-node", nil)
	ns := createNamespace(t, e.Client, "foreign-leases")
	holder := "someone-else"
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: node.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	if err := e.Client.Create(ctx(t), foreign); err != nil {
		t.Fatal(err)
	}
	p := publisher.New(admin, publisher.Options{HeartbeatPeriod: time.Second, LeaseNamespace: ns})
	st := publisher.State{Status: v1alpha1.GPUInventoryStatus{DriverVersion: "570.172.08"}}
	var err error
	if perr := poll.Until(ctx(t), 15*time.Second, func() (bool, string) {
		err = p.Publish(ctx(t), node.Name, st)
		return err != nil, "no heartbeat attempted yet"
	}); perr != nil {
		t.Fatal(perr)
	}
	if !strings.Contains(err.Error(), "not an agent heartbeat") {
		t.Errorf("error %v, want one naming the Lease as someone else's", err)
	}
	var now coordinationv1.Lease
	if err := e.Client.Get(ctx(t), client.ObjectKeyFromObject(foreign), &now); err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("someone else's Lease was written: %+v", now.Spec)
	}
}
