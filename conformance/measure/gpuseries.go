package measure

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// GPUSeriesFlavour is one exporter's names for the per-GPU series the
// accelerator-metrics requirement asks for.
type GPUSeriesFlavour struct {
	Exporter, Utilization, MemoryUsed string
	// InstanceUtilization, when set, also counts as utilization on a MIG
	// instance's series: DCGM exports no DCGM_FI_DEV_GPU_UTIL for MIG
	// instances, and its maintainers point to DCGM_FI_PROF_GR_ENGINE_ACTIVE
	// (NVIDIA/dcgm-exporter#216, #430).
	InstanceUtilization string
}

// GPUSeriesFlavours are gpulab's agent and NVIDIA's DCGM exporter; both
// label each series with the GPU's UUID.
var GPUSeriesFlavours = []GPUSeriesFlavour{
	{Exporter: "gpulab-agent", Utilization: "gpulab_gpu_utilization_ratio", MemoryUsed: "gpulab_gpu_memory_used_bytes"},
	{Exporter: "dcgm-exporter", Utilization: "DCGM_FI_DEV_GPU_UTIL", MemoryUsed: "DCGM_FI_DEV_FB_USED", InstanceUtilization: "DCGM_FI_PROF_GR_ENGINE_ACTIVE"},
}

func (f GPUSeriesFlavour) metrics() []string {
	out := []string{f.Utilization, f.MemoryUsed}
	if f.InstanceUtilization != "" {
		out = append(out, f.InstanceUtilization)
	}
	return out
}

// DefaultScrapeInterval is the scrape interval assumed for a series whose
// target's own the server does not report (Thanos, Mimir and a local
// scrape have no /api/v1/targets): kube-prometheus-stack's default, the
// usual Prometheus on Kubernetes. A sample is fresh within two intervals:
// the newest is at most one interval plus one scrape (its timeout is at
// most the interval) old on a healthy target.
const DefaultScrapeInterval = 30 * time.Second

// GPUSample is the newest sample of one per-GPU series.
type GPUSample struct {
	Metric string
	UUID   string
	// Node is the series' Hostname label (DCGM's) or hostname (gpulab's
	// agent): the node the exporter runs on. Index is its gpu label.
	Node, Index string
	// MIGInstance is DCGM's GPU_I_ID: the series is of one MIG instance of
	// the GPU UUID names; empty for the whole GPU. MIGProfile is its
	// GPU_I_PROFILE (1g.10gb).
	MIGInstance, MIGProfile string
	// At is the sample's timestamp; QueriedAt when it was read (the
	// query's evaluation time, on the server's clock).
	At, QueriedAt time.Time
	// Interval is the scrape interval of the series' target.
	Interval time.Duration
	// nodeLabel is the label Node came from, to name the series.
	nodeLabel string
}

// Age is how old the sample was when it was read.
func (s GPUSample) Age() time.Duration { return s.QueriedAt.Sub(s.At) }

// Fresh says the sample is within two scrape intervals of the read.
func (s GPUSample) Fresh() bool { return s.Age() <= 2*s.Interval }

// String names the series as PromQL would select it.
func (s GPUSample) String() string {
	var ls []string
	nodeLabel := s.nodeLabel
	if nodeLabel == "" {
		nodeLabel = "Hostname"
	}
	for _, l := range [][2]string{{"UUID", s.UUID}, {"GPU_I_ID", s.MIGInstance}, {nodeLabel, s.Node}, {"gpu", s.Index}} {
		if l[1] != "" {
			ls = append(ls, fmt.Sprintf("%s=%q", l[0], l[1]))
		}
	}
	return s.Metric + "{" + strings.Join(ls, ",") + "}"
}

func sampleFromLabels(metric string, label func(string) string) GPUSample {
	nodeLabel := "Hostname"
	node := label(nodeLabel)
	if node == "" {
		nodeLabel = "hostname"
		node = label(nodeLabel)
	}
	return GPUSample{Metric: metric, UUID: label("UUID"), Node: node, Index: label("gpu"),
		MIGInstance: label("GPU_I_ID"), MIGProfile: label("GPU_I_PROFILE"), nodeLabel: nodeLabel}
}

// GPUSamplesInScrape reads the per-GPU series of a /metrics page read at
// at. A sample without its own timestamp (the usual exposition) is as
// fresh as the read.
func GPUSamplesInScrape(s Scrape, at time.Time) []GPUSample {
	var out []GPUSample
	for _, f := range GPUSeriesFlavours {
		for _, metric := range f.metrics() {
			for _, m := range s[metric].GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["UUID"] == "" {
					continue
				}
				gs := sampleFromLabels(metric, func(k string) string { return labels[k] })
				gs.At, gs.QueriedAt, gs.Interval = at, at, DefaultScrapeInterval
				if m.TimestampMs != nil {
					gs.At = time.UnixMilli(m.GetTimestampMs())
				}
				out = append(out, gs)
			}
		}
	}
	return out
}

// gpuSeriesLabels are the labels a per-GPU query keeps: the GPU, its MIG
// instance, its node, and the target (for its scrape interval).
const gpuSeriesLabels = "UUID, GPU_I_ID, GPU_I_PROFILE, Hostname, hostname, gpu, job, instance"

// GPUSamplesInPrometheus asks a Prometheus server for the newest sample of
// every per-GPU series. timestamp() gives each sample's own time: a plain
// instant query answers with the evaluation time, and a series up to the
// lookback delta (5m) old would read as current. The second result says
// where the scrape intervals came from.
func GPUSamplesInPrometheus(ctx context.Context, p *Prometheus) ([]GPUSample, string, error) {
	intervals, err := p.scrapeIntervals(ctx)
	from := "Prometheus's targets, else " + DefaultScrapeInterval.String()
	if err != nil {
		// Not an error of the check: the default stands in.
		from = "the default " + DefaultScrapeInterval.String() + " (no target list: " + err.Error() + ")"
	}
	var out []GPUSample
	for _, f := range GPUSeriesFlavours {
		for _, metric := range f.metrics() {
			vec, err := p.query(ctx, "max by ("+gpuSeriesLabels+") (timestamp("+metric+"))")
			if err != nil {
				return nil, "", err
			}
			for _, v := range vec {
				if v.Metric["UUID"] == "" {
					continue
				}
				evaluated, errE := apiTime(v.Value[0])
				sampled, errS := apiTime(v.Value[1])
				if errE != nil || errS != nil {
					return nil, "", fmt.Errorf("querying Prometheus at %s: %s: sample %v: not a [time, \"value\"] pair: %w", p.URL, metric, v.Value, errors.Join(errE, errS))
				}
				gs := sampleFromLabels(metric, func(k string) string { return v.Metric[k] })
				gs.At, gs.QueriedAt = sampled, evaluated
				gs.Interval = DefaultScrapeInterval
				if d, ok := intervals[targetKey{v.Metric["job"], v.Metric["instance"]}]; ok {
					gs.Interval = d
				}
				out = append(out, gs)
			}
		}
	}
	return out, from, nil
}

// apiTime reads a time as the Prometheus API writes it: unix seconds, a
// number for the evaluation time and a string for a sample's value.
func apiTime(v any) (time.Time, error) {
	var secs float64
	switch x := v.(type) {
	case float64:
		secs = x
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return time.Time{}, err
		}
		secs = f
	default:
		return time.Time{}, fmt.Errorf("%v is not a time", v)
	}
	return time.UnixMilli(int64(secs*1000 + 0.5)), nil
}

// AdvertisedGPUs is how many GPU devices a node's allocatable offers:
// nvidia.com/gpu plus every nvidia.com/mig-* (the device plugin's mixed MIG
// strategy; with the single strategy nvidia.com/gpu counts MIG instances).
func AdvertisedGPUs(n corev1.Node) int64 {
	total := int64(0)
	for name, q := range n.Status.Allocatable {
		if name == "nvidia.com/gpu" || strings.HasPrefix(string(name), "nvidia.com/mig-") {
			total += q.Value()
		}
	}
	return total
}

// Coverage is what a check of per-GPU series found.
type Coverage struct {
	// Failures name each GPU, or node, without fresh utilization and
	// memory series, with its stale series by name.
	Failures []string
	// Covered counts the GPUs with fresh series; Exporters are those that
	// had them.
	Covered   int
	Exporters []string
	// MIG lists each GPU whose series are per MIG instance, with the
	// instances seen; MIGInstances counts them.
	MIG          []string
	MIGInstances int
}

// gpuView is one GPU's series, whole and per MIG instance.
type gpuView struct {
	uuid, node, index string
	fresh             map[string]bool // metric → a fresh sample, whole or per instance
	instanceFresh     map[string]bool // the same, per-instance samples only
	samples           []GPUSample
	instances         map[string]string // GPU_I_ID → GPU_I_PROFILE
}

func viewsByUUID(samples []GPUSample) map[string]*gpuView {
	out := map[string]*gpuView{}
	for _, s := range samples {
		g := out[s.UUID]
		if g == nil {
			g = &gpuView{uuid: s.UUID, fresh: map[string]bool{}, instanceFresh: map[string]bool{}, instances: map[string]string{}}
			out[s.UUID] = g
		}
		if g.node == "" {
			g.node = s.Node
		}
		if g.index == "" {
			g.index = s.Index
		}
		g.samples = append(g.samples, s)
		if s.MIGInstance != "" {
			g.instances[s.MIGInstance] = s.MIGProfile
		}
		if s.Fresh() {
			g.fresh[s.Metric] = true
			if s.MIGInstance != "" {
				g.instanceFresh[s.Metric] = true
			}
		}
	}
	return out
}

// exporter is the first flavour with fresh utilization and memory series
// for the GPU, or "".
func (g *gpuView) exporter() string {
	for _, f := range GPUSeriesFlavours {
		util := g.fresh[f.Utilization] || (f.InstanceUtilization != "" && g.instanceFresh[f.InstanceUtilization])
		if util && g.fresh[f.MemoryUsed] {
			return f.Exporter
		}
	}
	return ""
}

// devices is how many allocatable devices the GPU stands for: one, or one
// per MIG instance.
func (g *gpuView) devices() int {
	if len(g.instances) > 0 {
		return len(g.instances)
	}
	return 1
}

func (g *gpuView) name() string {
	s := "GPU " + g.uuid
	if g.node != "" {
		s += " on " + g.node
	}
	if g.index != "" {
		s += " (gpu " + g.index + ")"
	}
	return s
}

// problem says what an uncovered GPU lacks, naming its stale series.
func (g *gpuView) problem() string {
	var stale []string
	for _, s := range g.samples {
		if !s.Fresh() && !g.fresh[s.Metric] {
			stale = append(stale, fmt.Sprintf("%s last sampled %s before the query (limit %s, 2 × %s scrape interval)",
				s, s.Age().Round(time.Second), 2*s.Interval, s.Interval))
		}
	}
	sort.Strings(stale)
	msg := fmt.Sprintf("%s has no fresh utilization and memory series from one exporter (%s)", g.name(), flavourNames())
	if len(stale) > 0 {
		msg += "; stale: " + strings.Join(stale, "; ")
	}
	return msg
}

func (g *gpuView) mig() string {
	ids := make([]string, 0, len(g.instances))
	for id := range g.instances {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return numericLess(ids[i], ids[j]) })
	var parts []string
	for _, id := range ids {
		p := "GPU_I_ID " + id
		if prof := g.instances[id]; prof != "" {
			p += " (" + prof + ")"
		}
		parts = append(parts, p)
	}
	return fmt.Sprintf("%s: %d MIG instances: %s", g.name(), len(ids), strings.Join(parts, ", "))
}

func (c *Coverage) add(g *gpuView, seen map[string]bool) bool {
	if len(g.instances) > 0 {
		c.MIG = append(c.MIG, g.mig())
		c.MIGInstances += len(g.instances)
	}
	e := g.exporter()
	if e == "" {
		c.Failures = append(c.Failures, g.problem())
		return false
	}
	c.Covered++
	if !seen[e] {
		seen[e] = true
		c.Exporters = append(c.Exporters, e)
	}
	return true
}

// CheckGPUSeries checks that each GPU UUID (gpulab's GPUInventory) has
// fresh utilization and memory series from one exporter, whole or per MIG
// instance.
func CheckGPUSeries(samples []GPUSample, uuids []string) Coverage {
	views := viewsByUUID(samples)
	var c Coverage
	seen := map[string]bool{}
	for _, uuid := range uuids {
		g := views[uuid]
		if g == nil {
			c.Failures = append(c.Failures, fmt.Sprintf("GPU %s has no utilization and memory series (%s)", uuid, flavourNames()))
			continue
		}
		c.add(g, seen)
	}
	return c
}

// CheckNodeGPUSeries checks GPUs known only by count (a cluster without
// gpulab, where each node's allocatable is all there is): the GPUs whose
// series name each node (DCGM's Hostname label) must all be fresh and
// stand for at least the devices the node advertises (AdvertisedGPUs).
func CheckNodeGPUSeries(samples []GPUSample, advertised map[string]int64) Coverage {
	byNode := map[string][]*gpuView{}
	for _, g := range viewsByUUID(samples) {
		byNode[g.node] = append(byNode[g.node], g)
	}
	nodes := make([]string, 0, len(advertised))
	for n := range advertised {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var c Coverage
	seen := map[string]bool{}
	for _, n := range nodes {
		gpus := byNode[n]
		sort.Slice(gpus, func(i, j int) bool {
			if gpus[i].index != gpus[j].index {
				return numericLess(gpus[i].index, gpus[j].index)
			}
			return gpus[i].uuid < gpus[j].uuid
		})
		covered := 0
		for _, g := range gpus {
			if c.add(g, seen) {
				covered += g.devices()
			}
		}
		if want := advertised[n]; int64(covered) < want {
			c.Failures = append(c.Failures, fmt.Sprintf("node %s advertises %d GPUs (nvidia.com/gpu and nvidia.com/mig-*), but fresh utilization and memory series with Hostname=%q cover %d (%d GPUs have series)",
				n, want, n, covered, len(gpus)))
		}
	}
	return c
}

// numericLess orders GPU indexes and MIG instance IDs as numbers (2
// before 10), anything else as text.
func numericLess(a, b string) bool {
	x, errX := strconv.Atoi(a)
	y, errY := strconv.Atoi(b)
	if errX == nil && errY == nil {
		return x < y
	}
	return a < b
}

func flavourNames() string {
	var names []string
	for _, f := range GPUSeriesFlavours {
		n := f.Utilization + " + " + f.MemoryUsed
		if f.InstanceUtilization != "" {
			n = "(" + f.Utilization + " or, per MIG instance, " + f.InstanceUtilization + ") + " + f.MemoryUsed
		}
		names = append(names, n)
	}
	return strings.Join(names, ", or ")
}
