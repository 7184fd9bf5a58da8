package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

// GPU is one GPU's exported state.
type GPU struct {
	// Device is the scanned GPU.
	Device *nvml.Device
	// Healthy is whether its health is Healthy.
	Healthy bool
	// LastXID is the last XID seen on it, zero when none.
	LastXID uint64
}

// gpuLabels are the per-GPU labels, named as the DCGM exporter names them.
var gpuLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"}

func gpuDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc("gpulab_gpu_"+name, help, append(append([]string(nil), gpuLabels...), extra...), nil)
}

var (
	descInfo        = gpuDesc("info", "GPU identity; always 1.", "driver_version")
	descMemTotal    = gpuDesc("memory_total_bytes", "Framebuffer memory size (DCGM_FI_DEV_FB_TOTAL).")
	descMemUsed     = gpuDesc("memory_used_bytes", "Framebuffer memory in use (DCGM_FI_DEV_FB_USED).")
	descUtil        = gpuDesc("utilization_ratio", "Fraction of the last sample period a kernel ran (DCGM_FI_DEV_GPU_UTIL / 100).")
	descMemUtil     = gpuDesc("memory_utilization_ratio", "Fraction of the last sample period memory was read or written (DCGM_FI_DEV_MEM_COPY_UTIL / 100).")
	descTemp        = gpuDesc("temperature_celsius", "GPU core temperature (DCGM_FI_DEV_GPU_TEMP).")
	descPower       = gpuDesc("power_usage_watts", "Board power draw (DCGM_FI_DEV_POWER_USAGE).")
	descECC         = gpuDesc("ecc_uncorrected_errors_total", "Uncorrected ECC errors since the driver loaded (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL).")
	descRemapUnc    = gpuDesc("uncorrectable_remapped_rows", "Rows remapped for uncorrectable errors (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS).")
	descRemapCorr   = gpuDesc("correctable_remapped_rows", "Rows remapped for correctable errors (DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS).")
	descRemapFail   = gpuDesc("row_remap_failure", "1 when row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE).")
	descLastXID     = gpuDesc("last_xid", "Last XID seen on the GPU, 0 when none (DCGM_FI_DEV_XID_ERRORS).")
	descHealthy     = gpuDesc("healthy", "1 when the GPU can take work, 0 when it is Unhealthy or Unknown.")
	descQueryErrors = gpuDesc("query_errors", "NVML queries that failed in the last scan.")
)

// Collector is a prometheus.Collector of per-GPU gauges for one or more
// nodes (one per agent; many when simulating a fleet).
type Collector struct {
	mu    sync.RWMutex
	nodes map[string]node
}

type node struct {
	driver string
	gpus   []GPU
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns an empty Collector.
func NewCollector() *Collector { return &Collector{nodes: map[string]node{}} }

// Set replaces a node's GPUs. The collector keeps the slice.
func (c *Collector) Set(hostname, driverVersion string, gpus []GPU) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[hostname] = node{driver: driverVersion, gpus: gpus}
}

// Delete forgets a node.
func (c *Collector) Delete(hostname string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, hostname)
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descMemTotal, descMemUsed, descUtil, descMemUtil, descTemp,
		descPower, descECC, descRemapUnc, descRemapCorr, descRemapFail, descLastXID, descHealthy, descQueryErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for host, n := range c.nodes {
		for _, g := range n.gpus {
			collectGPU(ch, host, n.driver, g)
		}
	}
}

func collectGPU(ch chan<- prometheus.Metric, host, driver string, g GPU) {
	d := g.Device
	device := ""
	if d.Minor >= 0 {
		device = "nvidia" + strconv.Itoa(d.Minor)
	}
	lv := []string{strconv.Itoa(d.Index), d.UUID, d.PCIBusID, device, d.Name, host}
	gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append(lv, extra...)...)
	}
	opt := func(desc *prometheus.Desc, r nvml.Reading) {
		if r.OK {
			gauge(desc, r.Value)
		}
	}
	gauge(descInfo, 1, driver)
	gauge(descMemTotal, float64(d.MemoryTotalBytes))
	t := d.Telemetry
	opt(descMemUsed, t.MemoryUsedBytes)
	opt(descUtil, t.GPUUtilization)
	opt(descMemUtil, t.MemoryUtilization)
	opt(descTemp, t.TemperatureCelsius)
	opt(descPower, t.PowerWatts)
	if t.ECCUncorrectedVolatile.OK {
		ch <- prometheus.MustNewConstMetric(descECC, prometheus.CounterValue, t.ECCUncorrectedVolatile.Value, lv...)
	}
	if r := d.RemappedRows; r.Known {
		gauge(descRemapUnc, float64(r.Uncorrectable))
		gauge(descRemapCorr, float64(r.Correctable))
		gauge(descRemapFail, boolf(r.Failure))
	}
	gauge(descLastXID, float64(g.LastXID))
	gauge(descHealthy, boolf(g.Healthy))
	gauge(descQueryErrors, float64(len(d.Errors)))
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Metrics are every metric the agent exports.
type Metrics struct {
	// GPUs holds the per-GPU gauges.
	GPUs *Collector
	// ScanDuration observes each NVML scan.
	ScanDuration prometheus.Histogram
	// ScanErrors counts scans that failed outright.
	ScanErrors prometheus.Counter
	// Writes counts API writes by object (inventory, labels, capacity).
	Writes *prometheus.CounterVec
	// WriteErrors counts failed API writes by object.
	WriteErrors *prometheus.CounterVec
	// HealthEvents counts NVML health events by kind and whether the XID is
	// ignored.
	HealthEvents *prometheus.CounterVec
}

// New creates the agent's metrics and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		GPUs: NewCollector(),
		ScanDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpulab_agent_scan_duration_seconds",
			Help:    "Time to read every GPU over NVML.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}),
		ScanErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpulab_agent_scan_errors_total",
			Help: "NVML scans that failed.",
		}),
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulab_agent_writes_total",
			Help: "Server-side applies made, by object; the agent writes only what changed.",
		}, []string{"object"}),
		WriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulab_agent_write_errors_total",
			Help: "Server-side applies that failed, by object.",
		}, []string{"object"}),
		HealthEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpulab_agent_health_events_total",
			Help: "NVML health events received, by kind; ignored is true for application XIDs.",
		}, []string{"kind", "ignored"}),
	}
	reg.MustRegister(m.GPUs, m.ScanDuration, m.ScanErrors, m.Writes, m.WriteErrors, m.HealthEvents)
	return m
}
