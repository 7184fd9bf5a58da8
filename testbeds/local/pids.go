package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/testbeds/internal/procid"
)

// kwokctl writes a pid file for each component it starts; the testbed
// records beside it (procid.IDFile) the identity of the process it saw, and
// signals a PID only while it is still that process.

func readPID(path string) int { return procid.Read(path) }

func (t *Testbed) pidFile(component string) string {
	return filepath.Join(t.Workdir(), "pids", component+".pid")
}

// configuredBinaries maps each component to the binary the testbed gave
// kwokctl for it: from the configuration it created the cluster with, else
// from the link kwokctl made in the cluster's bin folder.
func (t *Testbed) configuredBinaries() map[string]string {
	out := map[string]string{}
	if links, err := filepath.Glob(filepath.Join(t.Workdir(), "bin", "*")); err == nil {
		for _, link := range links {
			if target, err := filepath.EvalSymlinks(link); err == nil {
				out[filepath.Base(link)] = target
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(t.stateDir(), "kwokctl.yaml"))
	if err != nil {
		return out
	}
	// The first document is the KwokctlConfiguration.
	first, _, _ := bytes.Cut(bytes.TrimPrefix(data, []byte("---\n")), []byte("\n---\n"))
	var config kwokctlConfiguration
	if err := yaml.Unmarshal(first, &config); err != nil {
		return out
	}
	for component, option := range map[string]string{
		"etcd": "etcdBinary", "kube-apiserver": "kubeApiserverBinary", "kube-controller-manager": "kubeControllerManagerBinary",
		"kube-scheduler": "kubeSchedulerBinary", "kwok-controller": "kwokControllerBinary",
	} {
		if bin, ok := config.Options[option].(string); ok && bin != "" {
			out[component] = bin
		}
	}
	for _, c := range config.Components {
		out[c.Name] = c.Binary
	}
	return out
}

// ownProcess is the identity of the component's live process if it is the
// one the testbed started. A pid file whose PID went to another process is
// removed (kwokctl would signal it, or take the component for running),
// saying so; that process is left alone.
func (t *Testbed) ownProcess(component string, bins map[string]string) (procid.Identity, bool) {
	path := t.pidFile(component)
	id, err := procid.Owned(path, procid.Expect{Program: component, Exe: bins[component]})
	if errors.Is(err, procid.ErrNotOurs) {
		fmt.Fprintf(t.opts.Log, "%s: %v; leaving it alone and removing the stale pid file %s\n", component, err, path)
		_ = os.Remove(path)
		_ = os.Remove(procid.IDFile(path))
		return procid.Identity{}, false
	}
	// A zombie is not running, though its identity still reads.
	return id, err == nil && processAlive(id.PID)
}

// recordIdentities records the identity of each component kwokctl started,
// the first time the testbed sees it (after Up's start and a restart), so
// later checks compare start times rather than trust the pid file.
func (t *Testbed) recordIdentities() {
	bins := t.configuredBinaries()
	for _, name := range t.components() {
		path := procid.IDFile(t.pidFile(name))
		if rec, err := procid.Load(path); err == nil && rec.PID == readPID(t.pidFile(name)) {
			continue
		}
		if id, ok := t.ownProcess(name, bins); ok {
			if err := procid.Save(path, id); err != nil {
				fmt.Fprintf(t.opts.Log, "recording the identity of %s: %v\n", name, err)
			}
		}
	}
}

// ownProcesses lists the testbed's live processes, removing stale pid files
// on the way.
func (t *Testbed) ownProcesses() []procid.Identity {
	bins := t.configuredBinaries()
	var out []procid.Identity
	for _, name := range t.components() {
		if id, ok := t.ownProcess(name, bins); ok {
			out = append(out, id)
		}
	}
	return out
}

// running says whether the process is still the one id was taken of.
func running(id procid.Identity) bool {
	return id.Check() == nil && processAlive(id.PID)
}

// signal sends sig to the process if it is still the one id was taken of;
// a process that is gone, or whose PID went to another, is no error.
func signal(id procid.Identity, sig syscall.Signal) error {
	err := procid.Signal(id, sig)
	if errors.Is(err, procid.ErrNotRunning) || errors.Is(err, procid.ErrNotOurs) {
		return nil
	}
	return err
}

// waitExited waits for the given processes to exit and kills any still
// running at the deadline, each only while its PID is still its own.
func waitExited(ctx context.Context, ids []procid.Identity, timeout time.Duration) error {
	err := poll(ctx, timeout, func(context.Context) (bool, error) {
		for _, id := range ids {
			if running(id) {
				return false, nil
			}
		}
		return true, nil
	})
	if err == nil {
		return nil
	}
	var errs []error
	for _, id := range ids {
		if running(id) {
			errs = append(errs, signal(id, syscall.SIGKILL))
		}
	}
	return errors.Join(errs...)
}

// stopProcess sends SIGTERM and waits for the process to be gone, then
// SIGKILL and waits again; each signal only while the PID is still its own.
func stopProcess(ctx context.Context, id procid.Identity) error {
	if err := signal(id, syscall.SIGTERM); err != nil {
		return err
	}
	gone := func(context.Context) (bool, error) { return !running(id), nil }
	if err := poll(ctx, stopTimeout, gone); err == nil {
		return nil
	} else if ctx.Err() != nil {
		return err
	}
	if err := signal(id, syscall.SIGKILL); err != nil {
		return err
	}
	if err := poll(ctx, killTimeout, gone); err != nil {
		return fmt.Errorf("pid %d still alive after SIGKILL: %w", id.PID, err)
	}
	return nil
}
