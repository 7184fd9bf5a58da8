package metrics

import (
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/podresources"
)

// Format selects the per-GPU series a Collector exports.
type Format string

// Formats.
const (
	// FormatGPULab exports gpulab_gpu_* in base units.
	FormatGPULab Format = "gpulab"
	// FormatDCGM exports the DCGM exporter's DCGM_FI_DEV_* fields, in its
	// units and with its labels, pod attribution included.
	FormatDCGM Format = "dcgm"
	// FormatBoth exports both; the default.
	FormatBoth Format = "both"
)

// ParseFormat reads a --metrics-format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatGPULab, FormatDCGM, FormatBoth:
		return f, nil
	}
	return "", fmt.Errorf("%q: want gpulab, dcgm or both", s)
}

func (f Format) gpulab() bool { return f != FormatDCGM }
func (f Format) dcgm() bool   { return f != FormatGPULab }

// Options configures the per-GPU series.
type Options struct {
	// Format selects them. Defaults to FormatBoth.
	Format Format
	// Owners, when set, is asked on every scrape which container holds each
	// GPU, by UUID, for the DCGM series' pod, namespace and container labels
	// (empty for a GPU it does not name). Nil leaves them empty.
	Owners func() map[string]podresources.Owner
}

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

// dcgmLabels are the DCGM exporter's labels, in its order: identity, the
// node, the driver, then the container holding the GPU.
var dcgmLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
	"container", "namespace", "pod"}

func dcgmDesc(field, help string) *prometheus.Desc {
	return prometheus.NewDesc("DCGM_FI_DEV_"+field, help, dcgmLabels, nil)
}

// The DCGM exporter's names, types and units (its default counters and the
// ECC field); values are as it reports them, not in base units.
var (
	dcgmGPUUtil     = dcgmDesc("GPU_UTIL", "GPU utilization (in %).")
	dcgmMemCopyUtil = dcgmDesc("MEM_COPY_UTIL", "Memory copy utilization (in %).")
	dcgmFBUsed      = dcgmDesc("FB_USED", "Framebuffer memory used (in MiB).")
	dcgmFBFree      = dcgmDesc("FB_FREE", "Framebuffer memory free (in MiB).")
	dcgmGPUTemp     = dcgmDesc("GPU_TEMP", "GPU temperature (in C).")
	dcgmPower       = dcgmDesc("POWER_USAGE", "Power draw (in W).")
	dcgmSMClock     = dcgmDesc("SM_CLOCK", "SM clock frequency (in MHz).")
	dcgmXID         = dcgmDesc("XID_ERRORS", "Value of the last XID error seen on the GPU, 0 when none.")
	dcgmECCDBE      = dcgmDesc("ECC_DBE_VOL_TOTAL", "Double-bit (uncorrected) volatile ECC errors since the driver loaded.")
	dcgmRemapUnc    = dcgmDesc("UNCORRECTABLE_REMAPPED_ROWS", "Rows remapped for uncorrectable errors.")
	dcgmRemapCorr   = dcgmDesc("CORRECTABLE_REMAPPED_ROWS", "Rows remapped for correctable errors.")
	dcgmRemapFail   = dcgmDesc("ROW_REMAP_FAILURE", "1 when row remapping failed.")
)

// Collector is a prometheus.Collector of per-GPU gauges for one or more
// nodes (one per agent; many when simulating a fleet).
type Collector struct {
	opts  Options
	mu    sync.RWMutex
	nodes map[string]node
}

type node struct {
	driver string
	gpus   []GPU
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns an empty Collector.
func NewCollector(opts Options) *Collector {
	if opts.Format == "" {
		opts.Format = FormatBoth
	}
	return &Collector{opts: opts, nodes: map[string]node{}}
}

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
	if c.opts.Format.gpulab() {
		for _, d := range []*prometheus.Desc{descInfo, descMemTotal, descMemUsed, descUtil, descMemUtil, descTemp,
			descPower, descECC, descRemapUnc, descRemapCorr, descRemapFail, descLastXID, descHealthy, descQueryErrors} {
			ch <- d
		}
	}
	if c.opts.Format.dcgm() {
		for _, d := range []*prometheus.Desc{dcgmGPUUtil, dcgmMemCopyUtil, dcgmFBUsed, dcgmFBFree, dcgmGPUTemp, dcgmPower,
			dcgmSMClock, dcgmXID, dcgmECCDBE, dcgmRemapUnc, dcgmRemapCorr, dcgmRemapFail} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	var owners map[string]podresources.Owner
	if c.opts.Format.dcgm() && c.opts.Owners != nil {
		// Asked before taking the lock: it may wait on the kubelet.
		owners = c.opts.Owners()
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for host, n := range c.nodes {
		for _, g := range n.gpus {
			if c.opts.Format.gpulab() {
				collectGPU(ch, host, n.driver, g)
			}
			if c.opts.Format.dcgm() {
				collectDCGM(ch, host, n.driver, g, owners[g.Device.UUID])
			}
		}
	}
}

// deviceName is the GPU's device node name (nvidiaN), empty when unknown.
func deviceName(d *nvml.Device) string {
	if d.Minor < 0 {
		return ""
	}
	return "nvidia" + strconv.Itoa(d.Minor)
}

func collectGPU(ch chan<- prometheus.Metric, host, driver string, g GPU) {
	d := g.Device
	lv := []string{strconv.Itoa(d.Index), d.UUID, d.PCIBusID, deviceName(d), d.Name, host}
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

// collectDCGM exports g as the DCGM exporter would. Like it, a field the GPU
// does not report has no series.
func collectDCGM(ch chan<- prometheus.Metric, host, driver string, g GPU, o podresources.Owner) {
	d := g.Device
	lv := []string{strconv.Itoa(d.Index), d.UUID, d.PCIBusID, deviceName(d), d.Name, host, driver,
		o.Container, o.Namespace, o.Pod}
	emit := func(desc *prometheus.Desc, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, t, v, lv...)
	}
	opt := func(desc *prometheus.Desc, t prometheus.ValueType, r nvml.Reading, scale func(float64) float64) {
		if r.OK {
			emit(desc, t, scale(r.Value))
		}
	}
	same := func(v float64) float64 { return v }
	percent := func(v float64) float64 { return math.Round(v * 100) }
	mib := func(v float64) float64 { return math.Floor(v / (1 << 20)) }
	t := d.Telemetry
	opt(dcgmGPUUtil, prometheus.GaugeValue, t.GPUUtilization, percent)
	opt(dcgmMemCopyUtil, prometheus.GaugeValue, t.MemoryUtilization, percent)
	opt(dcgmFBUsed, prometheus.GaugeValue, t.MemoryUsedBytes, mib)
	opt(dcgmFBFree, prometheus.GaugeValue, t.MemoryFreeBytes, mib)
	opt(dcgmGPUTemp, prometheus.GaugeValue, t.TemperatureCelsius, same)
	opt(dcgmPower, prometheus.GaugeValue, t.PowerWatts, same)
	opt(dcgmSMClock, prometheus.GaugeValue, t.SMClockMHz, same)
	emit(dcgmXID, prometheus.GaugeValue, float64(g.LastXID))
	opt(dcgmECCDBE, prometheus.CounterValue, t.ECCUncorrectedVolatile, same)
	if r := d.RemappedRows; r.Known {
		emit(dcgmRemapUnc, prometheus.CounterValue, float64(r.Uncorrectable))
		emit(dcgmRemapCorr, prometheus.CounterValue, float64(r.Correctable))
		emit(dcgmRemapFail, prometheus.GaugeValue, boolf(r.Failure))
	}
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

// New creates the agent's metrics and registers them on reg; opts configures
// the per-GPU series.
func New(reg prometheus.Registerer, opts Options) *Metrics {
	m := &Metrics{
		GPUs: NewCollector(opts),
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
