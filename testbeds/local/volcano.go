package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// volcanoSchedulerConf is Volcano's default tiers with GPUs added to binpack,
// so gangs pack whole nodes instead of fragmenting GPUs across the fleet.
const volcanoSchedulerConf = `actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
    arguments:
      binpack.resources: nvidia.com/gpu
      binpack.resources.nvidia.com/gpu: 2
`

// volcanoSchedulerConfDRA is the configuration with the predicates
// plugin's Dynamic Resource Allocation on, so Volcano allocates the
// ResourceClaims of the pods it places (v1.14 and later).
var volcanoSchedulerConfDRA = strings.Replace(volcanoSchedulerConf, "  - name: predicates\n",
	"  - name: predicates\n    arguments:\n      predicate.DynamicResourceAllocationEnable: true\n", 1)

// volcanoRelease is how the testbed runs one Volcano version. What it
// installs and passes comes from the module version that is built, so the
// CRDs, the scheduler configuration and the controllers move together.
type volcanoRelease struct {
	// crdDirs are the folders of Volcano's module whose CRDs are
	// installed: every CRD some informer of the scheduler or the enabled
	// controllers waits for (jobflow included; v1.14's scheduler also
	// watches HyperNodes and NodeShards, which are in the same bases
	// folder).
	crdDirs []string
	// schedulerConf is the scheduler's actions and tiers.
	schedulerConf string
	// controllers is vc-controller-manager's --controllers: the PodGroup,
	// Queue and Job controllers (v1.14 enables every controller but
	// sharding by default, the hypernode, cronjob, jobflow and gc ones
	// included; the testbed needs none of those).
	controllers string
	// schedulerArgs are flags only this version has.
	schedulerArgs []string
	// controllerManagerMetrics: vc-controller-manager serves /metrics
	// (--enable-metrics, --listen-address), the queue metrics among them.
	controllerManagerMetrics bool
}

// volcanoReleases has an entry for each of binaries.VolcanoVersions.
var volcanoReleases = map[string]volcanoRelease{
	"v1.10.0": {
		crdDirs:       []string{"config/crd/volcano/bases", "config/crd/jobflow/bases"},
		schedulerConf: volcanoSchedulerConf,
		controllers:   "pg-controller,queue-controller,job-controller",
	},
	"v1.14.1": {
		crdDirs:       []string{"config/crd/volcano/bases", "config/crd/jobflow/bases"},
		schedulerConf: volcanoSchedulerConfDRA,
		controllers:   "pg-controller,queue-controller,job-controller",
		// A configuration the scheduler cannot read or parse stops it,
		// instead of it scheduling with Volcano's built-in tiers (no
		// binpack on GPUs) and a line in its log.
		schedulerArgs:            []string{"--disable-default-scheduler-config=true"},
		controllerManagerMetrics: true,
	},
}

// volcanoReleaseOf returns how to run a Volcano version ("" is
// binaries.DefaultVolcanoVersion).
func volcanoReleaseOf(version string) (volcanoRelease, error) {
	if version == "" {
		version = binaries.DefaultVolcanoVersion
	}
	// A rebuild on other libraries (v1.14.1+k8s.1.34.4) runs as its
	// release does.
	r, ok := volcanoReleases[binaries.VolcanoModuleVersion(version)]
	if !ok {
		return r, fmt.Errorf("the local testbed has no settings for Volcano %s (add them to volcanoReleases in testbeds/local/volcano.go)", version)
	}
	return r, nil
}

type volcanoSetup struct {
	stateDir   string
	kubeconfig string
	ports      Ports
	// version is the Volcano that runs; "" is the default.
	version string
}

func newVolcanoSetup(stateDir, kubeconfig string, ports Ports, version string) (*volcanoSetup, error) {
	if _, err := volcanoReleaseOf(version); err != nil {
		return nil, err
	}
	return &volcanoSetup{stateDir: stateDir, kubeconfig: kubeconfig, ports: ports, version: version}, nil
}

// release is how this setup's version runs; newVolcanoSetup checked that
// there is one.
func (v *volcanoSetup) release() volcanoRelease {
	r, _ := volcanoReleaseOf(v.version)
	return r
}

func (v *volcanoSetup) confPath() string { return filepath.Join(v.stateDir, "volcano-scheduler.conf") }

func (v *volcanoSetup) writeFiles() error {
	return os.WriteFile(v.confPath(), []byte(v.release().schedulerConf), 0o644)
}

// components are Volcano's processes as kwokctl components: kwokctl starts
// them with the cluster, writes their pid and log under the cluster's
// workdir, and stops them on delete.
func (v *volcanoSetup) components(workdir string, bins *binaries.Set) []kwokComponent {
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	return []kwokComponent{
		{
			Name:    "vc-scheduler",
			Binary:  bins.VolcanoScheduler,
			WorkDir: workdir,
			Links:   []string{"kube-apiserver"},
			Args: append([]string{
				"--kubeconfig=" + v.kubeconfig,
				"--scheduler-conf=" + v.confPath(),
				"--schedule-period=1s",
				"--leader-elect=false",
				"--enable-metrics=true",
				"--listen-address=" + addr(v.ports.SchedulerMetrics),
				"--enable-healthz=true",
				"--healthz-address=" + addr(v.ports.SchedulerHealthz),
				"--cache-dumper=false",
				"--logtostderr",
				"-v=2",
			}, v.release().schedulerArgs...),
		},
		{
			Name:    "vc-controller-manager",
			Binary:  bins.VolcanoControllerManager,
			WorkDir: workdir,
			Links:   []string{"kube-apiserver"},
			Args: append([]string{
				"--kubeconfig=" + v.kubeconfig,
				"--leader-elect=false",
				"--controllers=" + v.release().controllers,
				"--enable-healthz=true",
				"--healthz-address=" + addr(v.ports.ControllerManagerHealthz),
				"--logtostderr",
				"-v=2",
			}, v.controllerManagerMetricsArgs(addr)...),
		},
	}
}

// controllerManagerMetricsArgs are vc-controller-manager's metrics flags,
// for the versions that serve metrics there.
func (v *volcanoSetup) controllerManagerMetricsArgs(addr func(int) string) []string {
	if !v.release().controllerManagerMetrics {
		return nil
	}
	return []string{"--enable-metrics=true", "--listen-address=" + addr(v.ports.ControllerManagerMetrics)}
}

// ControllerManagerMetrics says whether a Volcano version's
// vc-controller-manager serves /metrics (Ports.ControllerManagerMetrics).
func ControllerManagerMetrics(version string) bool {
	r, err := volcanoReleaseOf(version)
	return err == nil && r.controllerManagerMetrics
}

// crdDirs are Volcano's CRDs in the built module; the controller-manager's
// and the scheduler's informers wait for them before anything runs.
func (v *volcanoSetup) crdDirs(bins *binaries.Set) []string {
	dirs := make([]string, 0, len(v.release().crdDirs))
	for _, dir := range v.release().crdDirs {
		dirs = append(dirs, filepath.Join(bins.VolcanoModuleDir, filepath.FromSlash(dir)))
	}
	return dirs
}

// startVolcanoAgain starts Volcano's processes that have exited, once the
// API server serves Volcano's CRDs. kwokctl starts every component at
// once, and from v1.14 vc-scheduler exits when the API server does not
// answer yet: it reads the server's version before anything else ("failed
// to set component globals"), where v1.10 retried. Each is started again
// the way kwokctl started it, its first log kept, and waited for until
// healthy; one that exits again fails Up with its log.
func (t *Testbed) startVolcanoAgain(ctx context.Context, bins *binaries.Set, ports Ports) error {
	for _, component := range []string{"vc-scheduler", "vc-controller-manager"} {
		if t.runningPID(component) != 0 {
			continue
		}
		if err := t.restartLocked(ctx, bins, ports, component); err != nil {
			return err
		}
	}
	return nil
}

// applyDefaultQueue creates the "default" queue. Without Volcano's admission
// webhook nothing fills in weight and reclaimable, and a queue without them
// never admits a PodGroup.
func applyDefaultQueue(ctx context.Context, c client.Client) error {
	q := &schedulingv1beta1.Queue{
		TypeMeta:   metav1.TypeMeta{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "Queue"},
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: schedulingv1beta1.QueueSpec{
			Weight:      1,
			Reclaimable: new(true),
		},
	}
	if err := c.Create(ctx, q); err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("creating the default Volcano queue: %w", err)
	}
	return nil
}

// Versions are the third-party versions a testbed runs.
type Versions struct {
	// Volcano is the Volcano version (vc-scheduler, vc-controller-manager
	// and their CRDs).
	Volcano string
	// KubeRay is KubeRay's operator version, which runs only in a testbed
	// started with Options.KubeRay (KubeRayRuns).
	KubeRay     string
	KubeRayRuns bool
	// Karpenter is the Karpenter release whose kwok provider runs, in a
	// testbed started with Options.Autoscaler AutoscalerKarpenter; else
	// empty.
	Karpenter string
}

// String is "Volcano v1.14.1" or "Volcano v1.14.1, KubeRay v1.6.2" (and
// ", Karpenter v1.15.0" when it runs).
func (v Versions) String() string {
	s := "Volcano " + v.Volcano
	if v.KubeRayRuns {
		s += ", KubeRay " + v.KubeRay
	}
	if v.Karpenter != "" {
		s += ", Karpenter " + v.Karpenter
	}
	return s
}

// Versions are the versions the testbed runs, as recorded when it came up
// (for a result's environment), or those its Options ask for when it is
// not up.
func (t *Testbed) Versions() Versions {
	f := t.features()
	v := Versions{Volcano: f.VolcanoVersion, KubeRay: f.KubeRayVersion, KubeRayRuns: f.KubeRay}
	if f.Autoscaler == AutoscalerKarpenter {
		v.Karpenter = binaries.KarpenterVersion
	}
	return v
}
