package local

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/internal/procid"
)

const (
	// stopTimeout is how long a component has to exit on SIGTERM (the API
	// server drains its requests) before it is killed.
	stopTimeout = 30 * time.Second
	killTimeout = 10 * time.Second
)

// ComponentNames are the processes a testbed can have, as Restart and
// Components name them; ray-operator runs only in a testbed started with
// Options.KubeRay, karpenter-kwok only in one started with Options.Autoscaler
// AutoscalerKarpenter.
func ComponentNames() []string { return slices.Concat(baseComponents, optionalComponents) }

// Restart stops one component of the testbed by the PID in its pid file
// (only a process this testbed started: SIGTERM, SIGKILL after 30 s), waits
// until it is gone, has kwokctl start it again from the cluster's recorded
// configuration (same binary, flags, ports and log file; the old log is kept
// as <component>.pid<N>.log) and waits until it is healthy: the API server's
// /readyz for etcd and kube-apiserver, each other component's own health
// endpoint. A component that has already died is just started. kwokctl
// starts every stopped component of the cluster, not only this one.
func (t *Testbed) Restart(ctx context.Context, component string) error {
	if err := t.check(); err != nil {
		return err
	}
	if slices.Contains(optionalComponents, component) && !slices.Contains(t.components(), component) {
		return fmt.Errorf("testbed %q runs no %s (it was started without it)", t.opts.Name, component)
	}
	if !slices.Contains(t.components(), component) {
		return fmt.Errorf("unknown component %q, want one of %v", component, t.components())
	}
	if _, err := os.Stat(t.Workdir()); err != nil {
		return fmt.Errorf("testbed %q is not up (no %s)", t.opts.Name, t.Workdir())
	}
	// One restart or bring-up of this testbed at a time: two `kwokctl start`
	// at once would start a component twice.
	lock, err := t.lockTestbed(ctx)
	if err != nil {
		return err
	}
	defer lock.Release()
	ports, err := readPorts(t.stateDir())
	if err != nil {
		return fmt.Errorf("reading the testbed's ports: %w", err)
	}
	// The versions the testbed came up with, not today's default.
	bins, err := binaries.Lookup(ctx, t.binariesOptions())
	if err != nil {
		return err
	}
	return t.restartLocked(ctx, bins, ports, component)
}

// runningPID is the component's live pid from its pid file, or 0 when it is
// not running (or the pid went to another process).
func (t *Testbed) runningPID(component string) int {
	id, ok := t.ownProcess(component, t.configuredBinaries())
	if !ok {
		return 0
	}
	return id.PID
}

// restartLocked is Restart for a caller that holds the testbed's lock.
func (t *Testbed) restartLocked(ctx context.Context, bins *binaries.Set, ports Ports, component string) error {
	pidFile := t.pidFile(component)
	own, running := t.ownProcess(component, t.configuredBinaries())
	pid := own.PID

	start := time.Now()
	if !running {
		pid = 0
		fmt.Fprintf(t.opts.Log, "%s is not running; starting it\n", component)
	} else {
		fmt.Fprintf(t.opts.Log, "restarting %s (pid %d)\n", component, pid)
		if err := stopProcess(ctx, own); err != nil {
			return fmt.Errorf("stopping %s: %w", component, err)
		}
	}
	stopped := time.Since(start)
	// kwokctl starts only components it thinks are stopped, and takes any
	// pid that answers signal 0 (a zombie too) for a running one.
	for _, f := range []string{pidFile, procid.IDFile(pidFile)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// kwokctl truncates the log it starts a component with; keep the old
	// process's log beside it (Down archives both).
	logFile := filepath.Join(t.Workdir(), "logs", component+".log")
	kept := filepath.Join(t.Workdir(), "logs", fmt.Sprintf("%s.pid%d.log", component, pid))
	if pid == 0 {
		kept = filepath.Join(t.Workdir(), "logs", fmt.Sprintf("%s.before-%s.log", component, start.UTC().Format("150405")))
	}
	if err := os.Rename(logFile, kept); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := t.kwokctl(ctx, bins, "start", "cluster", "--name", t.opts.Name); err != nil {
		return fmt.Errorf("starting %s again: %w", component, err)
	}
	newPID := readPID(pidFile)
	if newPID <= 0 || newPID == pid || !processAlive(newPID) {
		return fmt.Errorf("kwokctl did not start %s again (pid file %s)", component, pidFile)
	}
	t.recordIdentities()
	if err := t.waitHealthy(ctx, component, newPID, ports); err != nil {
		return err
	}
	fmt.Fprintf(t.opts.Log, "%s restarted (pid %d): stopped in %s, healthy %s later\n", component, newPID,
		stopped.Round(100*time.Millisecond), (time.Since(start) - stopped).Round(100*time.Millisecond))
	return nil
}

// waitHealthy polls the component's health endpoint until it answers 200,
// failing at once if the new process dies.
func (t *Testbed) waitHealthy(ctx context.Context, component string, pid int, ports Ports) error {
	check, err := t.healthCheck(component, ports)
	if err != nil {
		return err
	}
	var last error
	err = poll(ctx, t.opts.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if !processAlive(pid) {
			log := filepath.Join(t.Workdir(), "logs", component+".log")
			tail := ""
			if data, err := os.ReadFile(log); err == nil {
				tail = "; last lines:\n" + lastLines(string(data), 5)
			}
			return false, fmt.Errorf("%s (pid %d) exited after its restart (log: %s)%s", component, pid, log, tail)
		}
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%s not healthy after its restart: %w (last check: %w)", component, err, last)
	}
	return err
}

// healthCheck returns the probe of a component.
func (t *Testbed) healthCheck(component string, ports Ports) (func(context.Context) error, error) {
	switch component {
	case "etcd", "kube-apiserver":
		// /readyz includes the API server's etcd check.
		cfg, err := t.RESTConfig()
		if err != nil {
			return nil, err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("/readyz: %w", err)
			}
			if string(bytes.TrimSpace(body)) != "ok" {
				return fmt.Errorf("/readyz: %s", body)
			}
			return nil
		}, nil
	case "kube-controller-manager":
		return httpHealth("https", ports.KubeControllerManager, "/healthz"), nil
	case "kube-scheduler":
		return httpHealth("https", ports.KubeScheduler, "/healthz"), nil
	case "kwok-controller":
		return httpHealth("http", ports.KwokController, "/healthz"), nil
	case "vc-scheduler":
		return httpHealth("http", ports.SchedulerHealthz, "/healthz"), nil
	case "vc-controller-manager":
		return httpHealth("http", ports.ControllerManagerHealthz, "/healthz"), nil
	case "gpulab-agent":
		return httpHealth("http", ports.AgentMetrics, "/readyz"), nil
	case kubeRayComponent:
		return httpHealth("http", ports.KubeRayHealthz, "/readyz"), nil
	case karpenterComponent:
		return httpHealth("http", ports.KarpenterHealthz, "/healthz"), nil
	}
	return nil, fmt.Errorf("no health check for %q", component)
}

// httpHealth GETs a loopback health endpoint. The control plane's serving
// certificates are self-signed, and only liveness is asked of them here.
func httpHealth(scheme string, port int, path string) func(context.Context) error {
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
	}
	url := scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + path
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
		}
		return nil
	}
}
