package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

const (
	pollInterval = 200 * time.Millisecond
	crdTimeout   = time.Minute
)

// baseComponents are the processes of every testbed, by the binary name
// kwokctl uses for their pid and log files; optionalComponents run only in
// testbeds started with them (Options.KubeRay).
var (
	baseComponents = []string{
		"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller",
		"vc-scheduler", "vc-controller-manager", "gpulab-agent",
	}
	optionalComponents = []string{kubeRayComponent, karpenterComponent}
)

// components are this testbed's processes: the base ones and those of the
// features it was started with.
func (t *Testbed) components() []string {
	out := slices.Clone(baseComponents)
	f := t.features()
	if f.KubeRay {
		out = append(out, kubeRayComponent)
	}
	if f.Autoscaler == AutoscalerKarpenter {
		out = append(out, karpenterComponent)
	}
	return out
}

// ComponentStatus is one process of the testbed.
type ComponentStatus struct {
	Name    string
	PID     int
	Running bool
	Log     string
}

// Status is a snapshot of the testbed.
type Status struct {
	Name       string
	Kubeconfig string
	Components []ComponentStatus
	// Ports are every loopback port the testbed chose.
	Ports Ports
	// NodesReady and Nodes count the fake GPU nodes; GPUs sums their
	// allocatable nvidia.com/gpu. Zero when the API server is down.
	Nodes, NodesReady, GPUs int
	// Queue is the default Volcano queue's state ("" when unknown).
	Queue string
	// KubeRay says whether the testbed runs KubeRay's operator
	// (Options.KubeRay).
	KubeRay bool
	// Autoscaler is the node autoscaler it runs (Options.Autoscaler; ""
	// or AutoscalerNone: none).
	Autoscaler string
	// APIError is why the API could not be read, if it could not.
	APIError error
}

// Components reports every process with its pid, liveness and log path.
func (t *Testbed) Components() []ComponentStatus {
	names := t.components()
	bins := t.configuredBinaries()
	out := make([]ComponentStatus, 0, len(names))
	for _, name := range names {
		s := ComponentStatus{Name: name, Log: filepath.Join(t.Workdir(), "logs", name+".log")}
		s.PID = readPID(t.pidFile(name))
		// Running only when the PID is still the process kwokctl started.
		_, s.Running = t.ownProcess(name, bins)
		out = append(out, s)
	}
	return out
}

// Status reads the testbed's processes and, when the API is up, its nodes
// and default queue.
func (t *Testbed) Status(ctx context.Context) (*Status, error) {
	if _, err := os.Stat(t.Workdir()); err != nil {
		return nil, fmt.Errorf("testbed %q is not up (no %s): run `make testbed-up`", t.opts.Name, t.Workdir())
	}
	s := &Status{Name: t.opts.Name, Kubeconfig: t.Kubeconfig(), Components: t.Components(), KubeRay: t.features().KubeRay,
		Autoscaler: t.features().Autoscaler}
	if ports, err := readPorts(t.stateDir()); err == nil {
		s.Ports = ports
	}
	c, err := t.Client()
	if err != nil {
		s.APIError = err
		return s, nil
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		s.APIError = err
		return s, nil
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		s.Nodes++
		if nodeReady(n) {
			s.NodesReady++
		}
		gpus := n.Status.Allocatable[GPUResource]
		s.GPUs += int(gpus.Value())
	}
	var q schedulingv1beta1.Queue
	if err := c.Get(ctx, client.ObjectKey{Name: "default"}, &q); err == nil {
		s.Queue = string(q.Status.State)
	}
	return s, nil
}

// deadComponents names processes that have stopped, with their logs.
func (t *Testbed) deadComponents() error {
	var dead []string
	for _, c := range t.Components() {
		if !c.Running {
			last := ""
			if data, err := os.ReadFile(c.Log); err == nil {
				last = "; last lines:\n" + lastLines(string(data), 5)
			}
			dead = append(dead, fmt.Sprintf("%s is not running (log: %s)%s", c.Name, c.Log, last))
		}
	}
	if len(dead) == 0 {
		return nil
	}
	return errors.New(strings.Join(dead, "; "))
}

// WaitReady waits until every process runs, every fake node is Ready with its
// GPUs allocatable and its GPUInventory published, the default queue is
// Open and, in a testbed with KubeRay (Karpenter), the operator (the
// provider) answers its readiness probe. A process that dies fails the wait at once, naming its log.
func (t *Testbed) WaitReady(ctx context.Context) error {
	c, err := t.Client()
	if err != nil {
		return err
	}
	var kubeRayReady func(context.Context) error
	if t.features().KubeRay {
		ports, err := readPorts(t.stateDir())
		if err != nil {
			return fmt.Errorf("reading the testbed's ports: %w", err)
		}
		kubeRayReady = httpHealth("http", ports.KubeRayHealthz, "/readyz")
	}
	var karpenterReady func(context.Context) error
	if t.features().Autoscaler == AutoscalerKarpenter {
		ports, err := readPorts(t.stateDir())
		if err != nil {
			return fmt.Errorf("reading the testbed's ports: %w", err)
		}
		karpenterReady = httpHealth("http", ports.KarpenterHealthz, "/readyz")
	}
	want := map[string]int64{}
	for _, n := range t.opts.Fleet.Nodes() {
		gpus := n.Status.Allocatable[GPUResource]
		want[n.Name] = gpus.Value()
	}
	var waiting string
	err = poll(ctx, t.opts.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := t.deadComponents(); err != nil {
			return false, err
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			waiting = "the API server: " + err.Error()
			return false, nil
		}
		var notReady []string
		seen := 0
		for i := range nodes.Items {
			n := &nodes.Items[i]
			gpus, ours := want[n.Name]
			if !ours {
				continue
			}
			seen++
			alloc := n.Status.Allocatable[GPUResource]
			if !nodeReady(n) || alloc.Value() != gpus {
				notReady = append(notReady, n.Name)
			}
		}
		if seen != len(want) || len(notReady) > 0 {
			waiting = fmt.Sprintf("nodes (%d of %d registered; not ready: %s)", seen, len(want), describe(notReady))
			return false, nil
		}
		var invs gpulabv1alpha1.GPUInventoryList
		if err := c.List(ctx, &invs); err != nil {
			waiting = "GPU inventories: " + err.Error()
			return false, nil
		}
		published := 0
		for _, inv := range invs.Items {
			if gpus, ours := want[inv.Name]; ours && int64(inv.Status.Summary.Count) == gpus {
				published++
			}
		}
		if published != len(want) {
			waiting = fmt.Sprintf("gpulab-agent to publish GPU inventories (%d of %d)", published, len(want))
			return false, nil
		}
		var q schedulingv1beta1.Queue
		if err := c.Get(ctx, client.ObjectKey{Name: "default"}, &q); err != nil || q.Status.State != schedulingv1beta1.QueueStateOpen {
			waiting = fmt.Sprintf("the default Volcano queue to be Open (state %q)", q.Status.State)
			return false, nil
		}
		if kubeRayReady != nil {
			if err := kubeRayReady(ctx); err != nil {
				waiting = "KubeRay's operator to be ready: " + err.Error()
				return false, nil
			}
		}
		if karpenterReady != nil {
			if err := karpenterReady(ctx); err != nil {
				waiting = "Karpenter to be ready: " + err.Error()
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && waiting != "" {
		return fmt.Errorf("testbed %q not ready: waiting for %s: %w", t.opts.Name, waiting, err)
	}
	return err
}

// apiServerRunning says whether the cluster's API server process is alive.
func (t *Testbed) apiServerRunning() bool {
	_, ok := t.ownProcess("kube-apiserver", t.configuredBinaries())
	return ok
}

// processAlive says whether pid is a live process. A zombie is gone only
// once all its threads are: the main thread of a Go program can be a zombie
// while the others still hold its files, listening sockets included, so the
// port is not free yet.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	state, err := procState(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || state != "Z" {
		return true
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, task := range tasks {
		// A thread whose stat is gone has exited.
		if state, err := procState(task); err == nil && state != "Z" {
			return true
		}
	}
	return false
}

// procState reads the state letter of a /proc stat file.
func procState(statPath string) (string, error) {
	data, err := os.ReadFile(statPath)
	if err != nil {
		return "", err
	}
	// The state follows the parenthesised command name.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) == 0 {
		return "", fmt.Errorf("no state in %s", statPath)
	}
	return fields[0], nil
}

// poll calls cond every pollInterval until it returns true, returns an
// error, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		done, err := cond(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s: %w", timeout, ctx.Err())
		case <-ticker.C:
		}
	}
}
