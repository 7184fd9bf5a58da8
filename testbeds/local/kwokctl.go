package local

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/local/stages"
)

// kwokPodCIDR keeps fake pod IPs apart from the API server's default service
// range (10.0.0.0/24), which kwok's own default would overlap.
const kwokPodCIDR = "10.244.0.0/16"

// The kwokctl configuration file is a multi-document YAML of kwok's config
// kinds. These structs hold only the fields gpulab sets.
type kwokctlConfiguration struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Options    map[string]any  `json:"options"`
	Components []kwokComponent `json:"components,omitempty"`
	// ComponentsPatches adds flags to kwokctl's own components.
	ComponentsPatches []kwokComponentPatch `json:"componentsPatches,omitempty"`
}

// kwokConfiguration is the kwok controller's own configuration, which
// kwokctl passes through.
type kwokConfiguration struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Options    map[string]any `json:"options"`
}

// kwokPodStageParallelism is how many pods kwok moves through their stages
// at once. Its default, 4, plays every node's kubelet with four workers in
// all, so a burst of pods waits in kwok's queue for seconds where real
// kubelets, one per node, would start them side by side; a latency
// measured on the testbed would then be kwok's.
const kwokPodStageParallelism = 32

// nodeMonitorGracePeriod is how long a node's lease may go unrenewed before
// kube-controller-manager marks it not ready (its default is 40 s).
const nodeMonitorGracePeriod = 5 * time.Minute

type kwokComponent struct {
	Name    string    `json:"name"`
	Binary  string    `json:"binary"`
	Args    []string  `json:"args"`
	WorkDir string    `json:"workDir"`
	Links   []string  `json:"links,omitempty"`
	Envs    []kwokEnv `json:"envs,omitempty"`
}

// kwokEnv is one environment variable of a component, added to what
// kwokctl's own process has (KUBECONFIG among them: a component that reads
// it must be given its own).
type kwokEnv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type kwokComponentPatch struct {
	Name      string         `json:"name"`
	ExtraArgs []kwokExtraArg `json:"extraArgs"`
}

type kwokExtraArg struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// kwokStages are the kwok Stage files the testbed loads from kwok's module:
// nodes become Ready at once, pods become Ready, deleted pods go away. A
// Job's pods finish through gpulab's own stages (package stages), which let
// a test choose success or failure.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// renderKwokctlConfig writes the configuration kwokctl creates the cluster
// from: local binaries only (nothing is downloaded), loopback only, Volcano
// (and KubeRay's operator, when kuberay is not nil) as extra components
// kwokctl supervises, any extra components after them, and kwok's stages.
// kube-controller-manager's client limits on the testbed (its defaults
// are 20 and 30).
const (
	controllerManagerQPS   = "100"
	controllerManagerBurst = "200"
)

func renderKwokctlConfig(workdir string, bins *binaries.Set, volcano *volcanoSetup, kuberay *kubeRaySetup, agent string, opts Options, extra ...kwokComponent) ([]byte, error) {
	components := append(volcano.components(workdir, bins),
		agentComponent(workdir, volcano.kubeconfig, agent, volcano.ports.AgentMetrics, opts.DRA))
	if kuberay != nil {
		components = append(components, kuberay.component(workdir, bins))
	}
	components = append(components, extra...)
	options := map[string]any{
		"runtime":                     "binary",
		"bindAddress":                 "127.0.0.1",
		"kubeVersion":                 binaries.KubernetesVersion,
		"etcdVersion":                 strings.TrimPrefix(binaries.EtcdVersion, "v"),
		"kwokVersion":                 binaries.KwokVersion,
		"etcdBinary":                  bins.Etcd,
		"kubeApiserverBinary":         bins.KubeAPIServer,
		"kubeControllerManagerBinary": bins.KubeControllerManager,
		"kubeSchedulerBinary":         bins.KubeScheduler,
		"kubectlBinary":               bins.Kubectl,
		"kwokControllerBinary":        bins.Kwok,
		"quietPull":                   true,
		// Every port is chosen by the testbed (see Ports), never by kwokctl.
		"etcdPort":                  volcano.ports.Etcd,
		"etcdPeerPort":              volcano.ports.EtcdPeer,
		"kubeApiserverPort":         volcano.ports.KubeAPIServer,
		"kubeControllerManagerPort": volcano.ports.KubeControllerManager,
		"kubeSchedulerPort":         volcano.ports.KubeScheduler,
		"kwokControllerPort":        volcano.ports.KwokController,
		// kwok renews every node's lease with four workers in all; at
		// 1,000 gangs on 1,250 nodes, on a saturated API server, a
		// round of renewals took over a minute, and the node
		// lifecycle controller tainted a quarter of the nodes
		// not-ready mid-run. The grace period is the testbed's, not
		// a verdict on the cluster under test.
		"kubeControllerManagerNodeMonitorGracePeriodMilliseconds": nodeMonitorGracePeriod.Milliseconds(),
	}
	if opts.NativeGangs {
		NativeGangKwokctlOptions(options)
	}
	docs := []any{
		kwokctlConfiguration{
			APIVersion: "config.kwok.x-k8s.io/v1alpha1",
			Kind:       "KwokctlConfiguration",
			Options:    options,
			Components: components,
			ComponentsPatches: []kwokComponentPatch{
				{
					Name:      "kwok-controller",
					ExtraArgs: []kwokExtraArg{{Key: "cidr", Value: kwokPodCIDR}},
				},
				// One instance each: a lease renewal that misses its
				// deadline on a saturated API server made them exit
				// mid-run (as a leader must), and nothing replaces them.
				//
				// Its client limit is raised from 20 QPS (burst 30): with
				// GPUs through DRA it creates a ResourceClaim per pod, and
				// at 100 gangs at once that limit alone held the last
				// claims 7 s at p99 (docs/benchmarks/2026-12-03-dra.md).
				{Name: "kube-controller-manager", ExtraArgs: []kwokExtraArg{
					{Key: "leader-elect", Value: "false"},
					{Key: "kube-api-qps", Value: controllerManagerQPS}, {Key: "kube-api-burst", Value: controllerManagerBurst},
				}},
				{Name: "kube-scheduler", ExtraArgs: []kwokExtraArg{{Key: "leader-elect", Value: "false"}}},
				{
					// On SIGTERM the API server closes its watches and exits in
					// seconds; without it, it waits for them until its 60 s
					// request timeout.
					Name:      "kube-apiserver",
					ExtraArgs: []kwokExtraArg{{Key: "shutdown-watch-termination-grace-period", Value: "5s"}},
				},
			},
		},
		kwokConfiguration{
			APIVersion: "config.kwok.x-k8s.io/v1alpha1",
			Kind:       "KwokConfiguration",
			// kwokctl does not default a configuration it is given, so
			// every option kwok defaults is spelled out: kwok's defaults,
			// but the pod stage parallelism and the testbed's pod CIDR.
			Options: map[string]any{
				"podPlayStageParallelism":         kwokPodStageParallelism,
				"nodePlayStageParallelism":        4,
				"nodeLeaseParallelism":            4,
				"podsOnNodeSyncParallelism":       1,
				"cidr":                            kwokPodCIDR,
				"manageAllNodes":                  false,
				"enableDebuggingHandlers":         true,
				"enableContentionProfiling":       false,
				"enableProfilingHandler":          true,
				"enablePodsOnNodeSyncListPager":   true,
				"enablePodsOnNodeSyncStreamWatch": false,
			},
		},
	}
	var out bytes.Buffer
	for _, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(data)
	}
	for _, stage := range kwokStages {
		data, err := os.ReadFile(filepath.Join(bins.KwokModuleDir, stage))
		if err != nil {
			return nil, fmt.Errorf("reading kwok stage: %w", err)
		}
		out.WriteString("---\n")
		out.Write(bytes.TrimPrefix(data, []byte("---\n")))
	}
	for _, data := range [][]byte{stages.PodSucceed, stages.PodFail} {
		out.WriteString("---\n")
		out.Write(data)
	}
	return out.Bytes(), nil
}

// createCluster writes the kwokctl configuration and runs `kwokctl create cluster`.
func (t *Testbed) createCluster(ctx context.Context, bins *binaries.Set, volcano *volcanoSetup, kuberay *kubeRaySetup, karpenter *karpenterSetup, agent string) error {
	if err := os.MkdirAll(t.stateDir(), 0o755); err != nil {
		return err
	}
	var extra []kwokComponent
	if karpenter != nil {
		if err := karpenter.writeFiles(); err != nil {
			return err
		}
		extra = append(extra, karpenter.component(t.Workdir()))
	}
	config, err := renderKwokctlConfig(t.Workdir(), bins, volcano, kuberay, agent, t.opts, extra...)
	if err != nil {
		return err
	}
	configPath := filepath.Join(t.stateDir(), "kwokctl.yaml")
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		return err
	}
	if err := volcano.writeFiles(); err != nil {
		return err
	}
	names := "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, vc-scheduler, vc-controller-manager and gpulab-agent"
	if kuberay != nil {
		names = "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, vc-scheduler, vc-controller-manager, gpulab-agent and ray-operator"
	}
	if karpenter != nil {
		names = strings.Replace(names, " and ", ", ", 1) + " and " + karpenterComponent
	}
	fmt.Fprintf(t.opts.Log, "starting %s (kwokctl, binary runtime)\n", names)
	return t.kwokctl(ctx, bins, "create", "cluster", "--name", t.opts.Name, "--config", configPath, "--runtime", "binary", "--wait", "1m")
}

// kwokctl runs kwokctl with the testbed's work directory and our kubectl first
// on PATH (kwokctl shells out to kubectl). Output goes to a log in the state
// dir, and its tail into the error.
func (t *Testbed) kwokctl(ctx context.Context, bins *binaries.Set, args ...string) error {
	if err := os.MkdirAll(t.opts.CacheDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(t.opts.CacheDir, "logs", "kwokctl-"+t.opts.Name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "$ kwokctl %s\n", strings.Join(args, " "))

	if args[0] == "create" || args[0] == "delete" {
		// They add and remove a context in $KUBECONFIG or ~/.kube/config
		// unless given a file of their own (start takes no such flag).
		args = append(args, "--kubeconfig="+t.kwokctlKubeconfig())
	}
	cmd := exec.CommandContext(ctx, bins.Kwokctl, args...)
	cmd.Env = append(os.Environ(),
		"KWOK_WORKDIR="+t.kwokWorkdir(),
		// kwokctl's default kubeconfig, and kubectl's, which it runs.
		"KUBECONFIG="+t.kwokctlKubeconfig(),
		"PATH="+filepath.Dir(bins.Kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(logFile, &out)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kwokctl %s: %w\n%s\n(log: %s)", args[0], err, lastLines(out.String(), 20), logPath)
	}
	return nil
}

// kwokctlKubeconfig is the only kubeconfig kwokctl may write: the user's
// ($KUBECONFIG, ~/.kube/config) is never touched. It lives in the state
// folder, which Down removes (delete refuses an empty path).
func (t *Testbed) kwokctlKubeconfig() string {
	return filepath.Join(t.stateDir(), "kwokctl-contexts.yaml")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
