package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// TestKwokctlConfigStaysLocal checks the rendered kwokctl configuration: our
// binaries only (so kwokctl never downloads), loopback only, Volcano as
// supervised components with pid and log files in the cluster's workdir,
// and the stages read from kwok's module.
// fakeKwokStages is a kwok module directory holding just its stages.
func fakeKwokStages(t *testing.T) string {
	t.Helper()
	kwokDir := t.TempDir()
	for _, stage := range kwokStages {
		path := filepath.Join(kwokDir, stage)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("kind: Stage\nmetadata:\n  name: "+filepath.Base(stage)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return kwokDir
}

func TestKwokctlConfigStaysLocal(t *testing.T) {
	kwokDir := fakeKwokStages(t)
	bins := &binaries.Set{
		Etcd: "/c/etcd", KubeAPIServer: "/c/kube-apiserver", KubeControllerManager: "/c/kcm", KubeScheduler: "/c/ks",
		Kubectl: "/c/kubectl", Kwok: "/c/kwok", Kwokctl: "/c/kwokctl",
		VolcanoScheduler: "/c/vc-scheduler", VolcanoControllerManager: "/c/vc-controller-manager",
		KubeRayOperator: "/c/ray-operator", KwokModuleDir: kwokDir,
	}
	v := &volcanoSetup{stateDir: "/state", kubeconfig: "/work/kubeconfig.yaml", ports: Ports{
		SchedulerMetrics: 1, SchedulerHealthz: 2, ControllerManagerHealthz: 3, AgentMetrics: 4,
		Etcd: 5, EtcdPeer: 6, KubeAPIServer: 7, KubeControllerManager: 8, KubeScheduler: 9, KwokController: 10,
		KubeRayMetrics: 11, KubeRayHealthz: 12,
	}}
	out, err := renderKwokctlConfig("/work", bins, v, nil, "/c/gpulab-agent", Options{})
	if err != nil {
		t.Fatal(err)
	}
	config := string(out)
	for _, want := range []string{
		"bindAddress: 127.0.0.1",
		"runtime: binary",
		"kubeApiserverBinary: /c/kube-apiserver",
		"etcdBinary: /c/etcd",
		"kwokControllerBinary: /c/kwok",
		"binary: /c/vc-scheduler",
		"workDir: /work",
		"--listen-address=127.0.0.1:1",
		"--scheduler-conf=/state/volcano-scheduler.conf",
		"--controllers=pg-controller,queue-controller",
		"--leader-elect=false",
		"value: " + kwokPodCIDR,
		"name: node-initialize.yaml",
		"name: gpulab-pod-succeed",
		"name: gpulab-pod-fail",
		"binary: /c/gpulab-agent",
		"--simulate-testbed-nodes",
		"--metrics-bind-address=127.0.0.1:4",
		// Every kwokctl port is the testbed's: kwokctl's own picker gives
		// testbeds created at once the same ports.
		"etcdPort: 5",
		"etcdPeerPort: 6",
		"kubeApiserverPort: 7",
		"kubeControllerManagerPort: 8",
		"kubeSchedulerPort: 9",
		"kwokControllerPort: 10",
		"key: shutdown-watch-termination-grace-period",
		"kind: KwokConfiguration",
		"podPlayStageParallelism: 32",
		"kubeControllerManagerNodeMonitorGracePeriodMilliseconds: 300000",
		"name: kube-controller-manager",
		"key: leader-elect",
		"- key: kube-api-qps\n    value: \"100\"",
	} {
		if !strings.Contains(config, want) {
			t.Errorf("kwokctl config lacks %q:\n%s", want, config)
		}
	}
	if strings.Contains(config, "csi-storage") {
		t.Errorf("Volcano must not run with --csi-storage")
	}
	if strings.Contains(config, "0.0.0.0") {
		t.Errorf("kwokctl config binds beyond loopback:\n%s", config)
	}
	if strings.Contains(config, "ray-operator") {
		t.Errorf("KubeRay is opt-in, but a testbed without it runs ray-operator:\n%s", config)
	}

	// With KubeRay: one more component, gang-scheduling through Volcano,
	// on the testbed's loopback ports.
	k := &kubeRaySetup{kubeconfig: v.kubeconfig, ports: v.ports, reconcileConcurrency: 4, qps: 200, burst: 400}
	out, err = renderKwokctlConfig("/work", bins, v, k, "/c/gpulab-agent", Options{})
	if err != nil {
		t.Fatal(err)
	}
	config = string(out)
	for _, want := range []string{
		"name: ray-operator",
		"binary: /c/ray-operator",
		"--kubeconfig=/work/kubeconfig.yaml",
		"--batch-scheduler=volcano",
		"--enable-leader-election=false",
		"--metrics-addr=127.0.0.1:11",
		"--health-probe-bind-address=127.0.0.1:12",
		"--reconcile-concurrency=4",
		"--qps=200",
		"--burst=400",
		"binary: /c/vc-scheduler",
	} {
		if !strings.Contains(config, want) {
			t.Errorf("kwokctl config with KubeRay lacks %q:\n%s", want, config)
		}
	}
	if strings.Contains(config, "0.0.0.0") {
		t.Errorf("kwokctl config with KubeRay binds beyond loopback:\n%s", config)
	}
	k.reconcileConcurrency = 0
	if args := strings.Join(k.component("/work", bins).Args, " "); strings.Contains(args, "--reconcile-concurrency") {
		t.Errorf("reconcile concurrency 0 must keep KubeRay's default, got args %s", args)
	}
}

// Native gangs: the gate for every control-plane process kwokctl starts,
// the PodGroup API served; without them, neither.
func TestKwokctlConfigNativeGangs(t *testing.T) {
	bins := &binaries.Set{KwokModuleDir: fakeKwokStages(t)}
	v := &volcanoSetup{stateDir: "/state", kubeconfig: "/work/kubeconfig.yaml"}
	for _, native := range []bool{false, true} {
		out, err := renderKwokctlConfig("/work", bins, v, nil, "/c/gpulab-agent", Options{NativeGangs: native})
		if err != nil {
			t.Fatal(err)
		}
		config := string(out)
		for _, want := range []string{"kubeFeatureGates: GenericWorkload=true", "kubeRuntimeConfig: scheduling.k8s.io/v1beta1=true"} {
			if strings.Contains(config, want) != native {
				t.Errorf("native gangs %v: config has %q: %v", native, want, !native)
			}
		}
	}
}

// DRA: the agent publishes the fake nodes' devices only when asked.
func TestKwokctlConfigDRA(t *testing.T) {
	bins := &binaries.Set{KwokModuleDir: fakeKwokStages(t)}
	v := &volcanoSetup{stateDir: "/state", kubeconfig: "/work/kubeconfig.yaml"}
	for _, dra := range []bool{false, true} {
		out, err := renderKwokctlConfig("/work", bins, v, nil, "/c/gpulab-agent", Options{DRA: dra})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(out), "--dra-driver=gpu.gpulab.io"); got != dra {
			t.Errorf("DRA %v: the agent's --dra-driver is there: %v", dra, got)
		}
	}
}
