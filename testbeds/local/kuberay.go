package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// kubeRayComponent is KubeRay's operator as kwokctl names its pid and log
// files (the binary's name, which Restart checks a pid against).
const kubeRayComponent = "ray-operator"

// kubeRaySetup runs KubeRay's operator beside Volcano, when a testbed is
// started with Options.KubeRay.
type kubeRaySetup struct {
	kubeconfig string
	ports      Ports
	// reconcileConcurrency is --reconcile-concurrency; 0 keeps KubeRay's
	// default (1).
	reconcileConcurrency int
	// qps and burst are its client's --qps and --burst; 0 keeps KubeRay's.
	qps   float64
	burst int
}

// component is the operator as a kwokctl component. Gang scheduling goes
// through Volcano: KubeRay creates a PodGroup per RayCluster and gives its
// pods schedulerName volcano and the group annotation. There is one
// operator per testbed, so no leader election; metrics and probes listen on
// the testbed's loopback ports. Every flag here means the same in v1.5.0
// and v1.6.2 (v1.6's --batch-scheduler takes volcano, yunikorn or
// kai-scheduler), so the versions share it.
func (k *kubeRaySetup) component(workdir string, bins *binaries.Set) kwokComponent {
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	args := []string{
		"--kubeconfig=" + k.kubeconfig,
		"--batch-scheduler=volcano",
		"--enable-leader-election=false",
		"--metrics-addr=" + addr(k.ports.KubeRayMetrics),
		"--health-probe-bind-address=" + addr(k.ports.KubeRayHealthz),
		// KubeRay's own RayCluster, RayJob and RayService metrics, beside
		// controller-runtime's.
		"--enable-metrics=true",
		"--log-stdout-encoder=console",
	}
	if k.reconcileConcurrency > 0 {
		args = append(args, "--reconcile-concurrency="+strconv.Itoa(k.reconcileConcurrency))
	}
	if k.qps > 0 {
		args = append(args, "--qps="+strconv.FormatFloat(k.qps, 'g', -1, 64))
	}
	if k.burst > 0 {
		args = append(args, "--burst="+strconv.Itoa(k.burst))
	}
	return kwokComponent{
		Name:    kubeRayComponent,
		Binary:  bins.KubeRayOperator,
		WorkDir: workdir,
		Links:   []string{"kube-apiserver"},
		Args:    args,
	}
}

// kubeRayCRDDir holds RayCluster's, RayJob's and RayService's CRDs (and
// from v1.6 RayCronJob's); the operator runs a controller for each of the
// first three, so it needs them all. The folder is the same in v1.5.0 and
// v1.6.2; v1.6's RayCronJob controller runs only behind its feature gate,
// which the testbed leaves off.
func kubeRayCRDDir(bins *binaries.Set) string {
	return filepath.Join(bins.KubeRayModuleDir, "config", "crd", "bases")
}

// featureSet records what a testbed was started with beyond the base
// components, and the versions it runs, so that status, restart and down,
// run without the flags up was given, know its processes and binaries.
type featureSet struct {
	KubeRay bool `json:"kubeRay"`
	// VolcanoVersion and KubeRayVersion are empty in a testbed started
	// before versions were recorded: it ran legacyVolcanoVersion and
	// legacyKubeRayVersion.
	VolcanoVersion string `json:"volcanoVersion,omitempty"`
	KubeRayVersion string `json:"kubeRayVersion,omitempty"`
	// Autoscaler is Options.Autoscaler; empty in a testbed started before
	// it could be chosen (none ran).
	Autoscaler string `json:"autoscaler,omitempty"`
}

// The versions every testbed ran before they could be chosen.
const (
	legacyVolcanoVersion = "v1.10.0"
	legacyKubeRayVersion = "v1.5.0"
)

func featuresPath(stateDir string) string { return filepath.Join(stateDir, "features.json") }

func writeFeatures(stateDir string, f featureSet) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(featuresPath(stateDir), data, 0o644)
}

// readFeatures returns ok false when the testbed recorded none (it is not
// up, or was started before features were recorded).
func readFeatures(stateDir string) (f featureSet, ok bool, err error) {
	data, err := os.ReadFile(featuresPath(stateDir))
	if errors.Is(err, os.ErrNotExist) {
		return f, false, nil
	}
	if err != nil {
		return f, false, err
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, false, fmt.Errorf("reading %s: %w", featuresPath(stateDir), err)
	}
	return f, true, nil
}

// features is what the running testbed was started with, or what Options
// ask for when it is not up.
func (t *Testbed) features() featureSet {
	if f, ok, err := readFeatures(t.stateDir()); err == nil && ok {
		if f.VolcanoVersion == "" {
			f.VolcanoVersion = legacyVolcanoVersion
		}
		if f.KubeRayVersion == "" {
			f.KubeRayVersion = legacyKubeRayVersion
		}
		return f
	}
	return t.wantedFeatures()
}

// wantedFeatures is what Options ask for.
func (t *Testbed) wantedFeatures() featureSet {
	return featureSet{KubeRay: t.opts.KubeRay, VolcanoVersion: t.opts.VolcanoVersion, KubeRayVersion: t.opts.KubeRayVersion,
		Autoscaler: t.opts.Autoscaler}
}
