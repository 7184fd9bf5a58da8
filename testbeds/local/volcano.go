package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/testbeds/local/binaries"
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

type volcanoSetup struct {
	stateDir   string
	kubeconfig string
	ports      Ports
}

func newVolcanoSetup(stateDir, kubeconfig string, ports Ports) *volcanoSetup {
	return &volcanoSetup{stateDir: stateDir, kubeconfig: kubeconfig, ports: ports}
}

func (v *volcanoSetup) confPath() string { return filepath.Join(v.stateDir, "volcano-scheduler.conf") }

func (v *volcanoSetup) writeFiles() error {
	return os.WriteFile(v.confPath(), []byte(volcanoSchedulerConf), 0o644)
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
			Args: []string{
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
			},
		},
		{
			Name:    "vc-controller-manager",
			Binary:  bins.VolcanoControllerManager,
			WorkDir: workdir,
			Links:   []string{"kube-apiserver"},
			Args: []string{
				"--kubeconfig=" + v.kubeconfig,
				"--leader-elect=false",
				"--controllers=pg-controller,queue-controller,job-controller",
				"--enable-healthz=true",
				"--healthz-address=" + addr(v.ports.ControllerManagerHealthz),
				"--logtostderr",
				"-v=2",
			},
		},
	}
}

// crdDirs are Volcano's CRDs; the controller-manager's informers wait for
// all of them (jobflow included) before any controller runs.
func (v *volcanoSetup) crdDirs(bins *binaries.Set) []string {
	return []string{
		filepath.Join(bins.VolcanoModuleDir, "config", "crd", "volcano", "bases"),
		filepath.Join(bins.VolcanoModuleDir, "config", "crd", "jobflow", "bases"),
	}
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
