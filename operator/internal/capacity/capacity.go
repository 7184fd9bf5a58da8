// Package capacity is the operator's view of healthy GPU capacity: one
// entry per schedulable node, from GPUInventory where the node agent runs,
// from node allocatable and GFD labels otherwise. It resolves wholeNode
// requests and decides whether a gang can ever fit.
package capacity

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
)

// Node is one schedulable node's healthy GPUs.
type Node struct {
	Name      string
	Product   string
	MemoryMiB int64
	Healthy   int32
	// Devices are the devices each DeviceClass selects in the node's
	// ResourceSlices (Dynamic Resource Allocation), by class: what a group
	// that claims its GPUs from that class can have there.
	Devices map[string]int32
}

// Available is how many GPUs of sel the node offers: the class's devices
// for a group that claims them through DRA, else its healthy GPUs.
func (n Node) Available(sel Selector) int32 {
	if sel.DeviceClass != "" {
		return n.Devices[sel.DeviceClass]
	}
	return n.Healthy
}

// Leases are the agents' heartbeat Leases by node name.
type Leases map[string]*coordinationv1.Lease

// Nodes builds the capacity view at time now, each inventory's heartbeat
// from its own writes and its node's Lease in leases. Only Ready, schedulable nodes
// count. A node's fresh GPUInventory is the truth for that node (it knows
// which GPUs are sick); a node without one (the agent not rolled out there
// yet, or not installed at all), or whose inventory is stale, counts from
// allocatable nvidia.com/gpu and its GFD labels. fromInventory says every
// GPU node had a fresh inventory, so inventory watches alone report
// capacity changes; stale names the nodes whose inventory was not trusted.
//
// devices are the nodes' DRA devices by node and DeviceClass (nil where
// DRA is not served); a node that offers some counts even with no GPU
// otherwise known (a DRA driver other than gpulab's agent).
func Nodes(invs []gpulabv1alpha1.GPUInventory, leases Leases, nodes []corev1.Node, devices map[string]map[string]int32, now time.Time) (view []Node, fromInventory bool, stale []string) {
	byName := make(map[string]*gpulabv1alpha1.GPUInventory, len(invs))
	for i := range invs {
		byName[invs[i].Name] = &invs[i]
	}
	fromInventory = len(invs) > 0
	for i := range nodes {
		n := &nodes[i]
		if !schedulable(n) {
			continue
		}
		var entry Node
		inv, ok := byName[n.Name]
		if ok && Stale(inv, leases[n.Name], now) {
			stale = append(stale, n.Name)
			ok = false
		}
		if ok {
			entry = Node{Name: n.Name, Product: inv.Status.Summary.Product, MemoryMiB: inv.Status.Summary.MemoryMiB, Healthy: inv.Status.Summary.Healthy}
		} else {
			gpus := n.Status.Allocatable[gfd.GPUResource]
			mem, _ := strconv.ParseInt(n.Labels[gfd.Memory], 10, 64)
			entry = Node{Name: n.Name, Product: n.Labels[gfd.Product], MemoryMiB: mem, Healthy: int32(gpus.Value())}
			if entry.Healthy > 0 {
				fromInventory = false
			}
		}
		entry.Devices = devices[n.Name]
		if entry.Healthy > 0 || len(entry.Devices) > 0 {
			view = append(view, entry)
		}
	}
	sort.Slice(view, func(i, j int) bool { return view[i].Name < view[j].Name })
	sort.Strings(stale)
	return view, fromInventory, stale
}

// Stale says whether inv's agent missed its heartbeats by now: neither the
// inventory nor its node's heartbeat Lease (nil: none) was renewed in time.
// An inventory that promises no heartbeat (an older agent) never goes stale.
func Stale(inv *gpulabv1alpha1.GPUInventory, lease *coordinationv1.Lease, now time.Time) bool {
	at, ok := StaleAt(inv, lease)
	return ok && now.After(at)
}

// StaleAt is when inv goes stale if no further heartbeat comes: its own
// write's heartbeat lasts v1alpha1.StaleHeartbeats of the promised periods, the
// Lease's its leaseDurationSeconds, and the later one counts. ok is false
// for an inventory that promises none, or has no heartbeat of either kind.
func StaleAt(inv *gpulabv1alpha1.GPUInventory, lease *coordinationv1.Lease) (at time.Time, ok bool) {
	st := &inv.Status
	if st.HeartbeatSeconds <= 0 {
		return time.Time{}, false
	}
	period := time.Duration(st.HeartbeatSeconds) * time.Second
	if st.HeartbeatTime != nil {
		at, ok = st.HeartbeatTime.Add(gpulabv1alpha1.StaleHeartbeats*period), true
	}
	if lease != nil && lease.Spec.RenewTime != nil {
		lasts := gpulabv1alpha1.StaleHeartbeats * period
		if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
			lasts = time.Duration(*d) * time.Second
		}
		if until := lease.Spec.RenewTime.Add(lasts); !ok || until.After(at) {
			at, ok = until, true
		}
	}
	return at, ok
}

// NodeChanged says whether a node update can change the view: whether it
// counts, and what its GPUs are when it has no inventory. Status
// heartbeats change none of that.
func NodeChanged(was, now *corev1.Node) bool {
	wasGPUs, nowGPUs := was.Status.Allocatable[gfd.GPUResource], now.Status.Allocatable[gfd.GPUResource]
	return schedulable(was) != schedulable(now) || wasGPUs.Cmp(nowGPUs) != 0 ||
		was.Labels[gfd.Product] != now.Labels[gfd.Product] || was.Labels[gfd.Memory] != now.Labels[gfd.Memory]
}

// InventoryChanged says whether an inventory update, its node's heartbeat
// Lease being lease, can change the view at now, or bring forward the time
// it goes stale. A fresh inventory's heartbeat does neither.
func InventoryChanged(was, now *gpulabv1alpha1.GPUInventory, lease *coordinationv1.Lease, at time.Time) bool {
	return heartbeatChanged(was, lease, now, lease, at)
}

// LeaseChanged is InventoryChanged for an update of inv's heartbeat Lease:
// a renewal of a fresh one changes nothing; one that makes a stale
// inventory fresh does.
func LeaseChanged(inv *gpulabv1alpha1.GPUInventory, was, now *coordinationv1.Lease, at time.Time) bool {
	return heartbeatChanged(inv, was, inv, now, at)
}

func heartbeatChanged(wasInv *gpulabv1alpha1.GPUInventory, wasLease *coordinationv1.Lease,
	nowInv *gpulabv1alpha1.GPUInventory, nowLease *coordinationv1.Lease, at time.Time) bool {
	if wasInv.Status.Summary != nowInv.Status.Summary || Stale(wasInv, wasLease, at) || Stale(nowInv, nowLease, at) {
		return true
	}
	wasAt, wasOK := StaleAt(wasInv, wasLease)
	nowAt, nowOK := StaleAt(nowInv, nowLease)
	return nowOK && (!wasOK || nowAt.Before(wasAt))
}

func schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Selector narrows the nodes a group may use.
type Selector struct {
	// Product is the GFD product name; empty means any.
	Product string
	// MinMemoryMiB is the least GPU memory; zero means any.
	MinMemoryMiB int64
	// DeviceClass, when set, takes the GPUs from the devices of this
	// DeviceClass (DRA) instead of the healthy GPU count.
	DeviceClass string
}

// Matches says whether node n satisfies the selector: for a DeviceClass,
// a node offering some of its devices.
func (s Selector) Matches(n Node) bool {
	return (s.Product == "" || n.Product == s.Product) && n.MemoryMiB >= s.MinMemoryMiB &&
		(s.DeviceClass == "" || n.Devices[s.DeviceClass] > 0)
}

// String names the GPUs the selector wants, for messages.
func (s Selector) String() string {
	parts := []string{}
	if s.Product != "" {
		parts = append(parts, s.Product)
	}
	if s.MinMemoryMiB > 0 {
		parts = append(parts, fmt.Sprintf("≥%d MiB", s.MinMemoryMiB))
	}
	what := "GPUs"
	if s.DeviceClass != "" {
		what = "devices of DeviceClass " + s.DeviceClass
	}
	if len(parts) == 0 {
		return what
	}
	return strings.Join(parts, " ") + " " + what
}

// WholeNodeGPUs resolves gpus.wholeNode: the largest healthy GPU count among
// matching nodes, so every pod owns a whole healthy node. Zero when no node
// matches.
func WholeNodeGPUs(nodes []Node, sel Selector) int32 {
	var best int32
	for _, n := range nodes {
		if sel.Matches(n) && n.Available(sel) > best {
			best = n.Available(sel)
		}
	}
	return best
}

// Demand is the part of a gang one group must place.
type Demand struct {
	Group      string
	Selector   Selector
	GPUsPerPod int32
	// Pods is how many of the group's pods the gang needs at once.
	Pods int32
}

// Verdict says whether a gang can ever fit the healthy capacity.
type Verdict struct {
	Fits bool
	// Grows says the gang does not fit today's nodes, but the cluster's
	// autoscaler can add what it lacks (Grow): its pods are created so
	// that the autoscaler sees them.
	Grows   bool
	Reason  string
	Message string
}

// Check decides whether the demands can ever fit. It only says no when that
// is certain: per group, the pods that fit on matching nodes (a pod needs
// all its GPUs on one node) must cover the group; and groups that draw on
// the same nodes must not need more GPUs than those nodes have.
func Check(nodes []Node, demands []Demand) Verdict {
	totals := map[Selector]int64{}
	for _, d := range demands {
		if d.GPUsPerPod <= 0 || d.Pods <= 0 {
			continue
		}
		var slots, matching, roomy int32
		for _, n := range nodes {
			if !d.Selector.Matches(n) {
				continue
			}
			matching++
			fit := n.Available(d.Selector) / d.GPUsPerPod
			slots += fit
			if fit > 0 {
				roomy++
			}
		}
		if matching == 0 {
			return Verdict{Reason: gpulabv1alpha1.ReasonNoMatchingNodes,
				Message: fmt.Sprintf("group %s needs %s; no schedulable node has healthy ones (%s)", d.Group, d.Selector, describe(nodes))}
		}
		if slots < d.Pods {
			return Verdict{Reason: gpulabv1alpha1.ReasonInsufficientGPUs, Message: shortfall(d, slots, roomy)}
		}
		totals[d.Selector] += int64(d.Pods) * int64(d.GPUsPerPod)
	}
	for sel, need := range totals {
		var have int64
		for _, n := range nodes {
			if sel.Matches(n) {
				have += int64(n.Available(sel))
			}
		}
		if need > have {
			return Verdict{Reason: gpulabv1alpha1.ReasonInsufficientGPUs,
				Message: fmt.Sprintf("the gang needs %d healthy %s; %d exist", need, sel, have)}
		}
	}
	return Verdict{Fits: true, Reason: gpulabv1alpha1.ReasonFits, Message: "the gang fits the healthy GPU capacity"}
}

func shortfall(d Demand, slots, roomy int32) string {
	if slots == roomy {
		// At most one pod per node: count nodes, the way people think of it.
		return fmt.Sprintf("group %s needs %d nodes with ≥%d healthy %s; %d exist", d.Group, d.Pods, d.GPUsPerPod, d.Selector, roomy)
	}
	return fmt.Sprintf("group %s needs %d pods with %d healthy %s each on one node; the matching nodes hold %d", d.Group, d.Pods, d.GPUsPerPod, d.Selector, slots)
}

// describe summarises the fleet by product for messages.
func describe(nodes []Node) string {
	if len(nodes) == 0 {
		return "no GPU nodes"
	}
	count := map[string]int{}
	for _, n := range nodes {
		count[n.Product]++
	}
	products := make([]string, 0, len(count))
	for p := range count {
		products = append(products, p)
	}
	sort.Strings(products)
	parts := make([]string, 0, len(products))
	for _, p := range products {
		parts = append(parts, fmt.Sprintf("%d× %s", count[p], p))
	}
	return "fleet: " + strings.Join(parts, ", ")
}
