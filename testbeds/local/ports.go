package local

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ports are every loopback port of a testbed. The testbed picks them all,
// kwokctl's too: kwokctl's own picker counts down from 32767 in every
// process, so two testbeds created at the same moment got the same ports and
// one's components died on bind (or, worse, used the other's etcd).
type Ports struct {
	Etcd                  int `json:"etcd"`
	EtcdPeer              int `json:"etcdPeer"`
	KubeAPIServer         int `json:"kubeApiserver"`
	KubeControllerManager int `json:"kubeControllerManager"`
	KubeScheduler         int `json:"kubeScheduler"`
	KwokController        int `json:"kwokController"`
	// Volcano's and the agent's, for health checks and Prometheus scraping.
	SchedulerMetrics         int `json:"schedulerMetrics"`
	SchedulerHealthz         int `json:"schedulerHealthz"`
	ControllerManagerHealthz int `json:"controllerManagerHealthz"`
	// ControllerManagerMetrics is vc-controller-manager's /metrics, where
	// v1.14 serves the queue metrics (volcano_queue_pod_group_*_count)
	// that v1.10's scheduler served; v1.10's controller manager has none.
	ControllerManagerMetrics int `json:"controllerManagerMetrics,omitempty"`
	AgentMetrics             int `json:"agentMetrics"`
	// KubeRay's operator's, picked for every testbed and used by those
	// started with Options.KubeRay.
	KubeRayMetrics int `json:"kubeRayMetrics"`
	KubeRayHealthz int `json:"kubeRayHealthz"`
	// Karpenter's kwok provider's, picked for every testbed and used by
	// those started with Options.Autoscaler AutoscalerKarpenter (absent
	// from a testbed started before it could).
	KarpenterMetrics int `json:"karpenterMetrics,omitempty"`
	KarpenterHealthz int `json:"karpenterHealthz,omitempty"`
}

func (p *Ports) all() []*int {
	return []*int{
		&p.Etcd, &p.EtcdPeer, &p.KubeAPIServer, &p.KubeControllerManager, &p.KubeScheduler, &p.KwokController,
		&p.SchedulerMetrics, &p.SchedulerHealthz, &p.ControllerManagerHealthz, &p.ControllerManagerMetrics, &p.AgentMetrics,
		&p.KubeRayMetrics, &p.KubeRayHealthz, &p.KarpenterMetrics, &p.KarpenterHealthz,
	}
}

func portsPath(stateDir string) string { return filepath.Join(stateDir, "ports.json") }

func readPorts(stateDir string) (Ports, error) {
	var p Ports
	data, err := os.ReadFile(portsPath(stateDir))
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("reading %s: %w", portsPath(stateDir), err)
	}
	return p, nil
}

func writePorts(stateDir string, p Ports) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(portsPath(stateDir), data, 0o644)
}

// Ports come from [lowestPort, portsTop()): below the kernel's ephemeral
// range, so no outgoing connection (whose source port comes from that range)
// takes one between the moment it is picked and the moment its component
// binds it, and below kwokctl's own countdown from 32767, which clusters
// created without explicit ports (older gpulab, plain kwokctl) use.
const (
	lowestPort         = 10000
	highestTop         = 30000
	defaultEphemeralLo = 32768
)

// allocatePorts picks free loopback ports for a testbed in testbedsDir
// (<cache>/testbeds), skipping every port another testbed there recorded in
// its ports.json, listening or not: a component being restarted has released
// its port for a moment. The caller holds the bring-up lock and records the
// result before releasing it. The scan starts at a random port, so a testbed
// starting right after another stopped does not get its ports back.
func allocatePorts(testbedsDir string) (Ports, error) {
	lo, top := lowestPort, portsTop()
	return allocatePortsFrom(testbedsDir, lo+rand.IntN(top-lo))
}

// allocatePortsFrom scans down from start, wrapping around the range.
func allocatePortsFrom(testbedsDir string, start int) (Ports, error) {
	reserved := map[int]bool{}
	files, _ := filepath.Glob(filepath.Join(testbedsDir, "*", "ports.json"))
	for _, f := range files {
		other, err := readPorts(filepath.Dir(f))
		if err != nil {
			continue // half-written by a testbed that failed: its ports are free again or bound
		}
		for _, p := range other.all() {
			reserved[*p] = true
		}
	}
	lo, top := lowestPort, portsTop()
	span := top - lo
	var ports Ports
	fields := ports.all()
	next := 0
	for i := 0; i < span && next < len(fields); i++ {
		port := lo + ((start-lo-i)%span+span)%span
		if !reserved[port] && portFree(port) {
			*fields[next] = port
			next++
		}
	}
	if next < len(fields) {
		return Ports{}, fmt.Errorf("no %d free loopback ports between %d and %d", len(fields), lo, top)
	}
	return ports, nil
}

// portsTop is the end of the testbed's port range.
func portsTop() int { return min(highestTop, ephemeralLow()) }

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeralLo
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return defaultEphemeralLo
	}
	lo, err := strconv.Atoi(fields[0])
	if err != nil || lo < lowestPort+1000 {
		// No room below it: keep the usual range; the lock and the
		// reservations still keep testbeds apart.
		return defaultEphemeralLo
	}
	return lo
}

// portFree says whether nothing listens on the loopback port. A listener on
// all addresses makes this bind fail too, so loopback is all it touches.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
