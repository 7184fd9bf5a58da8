package profile

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/measure"
)

// ReconcileConcurrency is gpulab-operator's default --reconcile-concurrency,
// which the suite runs it at (what is benchmarked is what ships); KubeRay
// beside it gets the same.
const ReconcileConcurrency = 64

// OperatorQPS and OperatorBurst are gpulab-operator's default client
// limits (--kube-api-qps, --kube-api-burst); KubeRay beside it gets the
// same, so that no side waits on its own client's rate limiter.
const (
	OperatorQPS   = 1000
	OperatorBurst = 2000
)

// OperatorProcess is one gpulab-operator replica run as a local process,
// so the suite can kill it like a crash would.
type OperatorProcess struct {
	Name        string
	binary      string
	kubeconfig  string
	logPath     string
	metricsPort int
	probePort   int
	// pprofPort serves /debug/pprof/ when OperatorOptions.Pprof asked.
	pprofPort int
	env, args []string
	// leaderElect is false for a SoleReplica.
	leaderElect bool
	cmd         *exec.Cmd
	exited      chan struct{}
}

func newOperatorProcess(name, binary, kubeconfig, logDir string) (*OperatorProcess, error) {
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	return &OperatorProcess{Name: name, binary: binary, kubeconfig: kubeconfig, logPath: filepath.Join(logDir, name+".log"),
		metricsPort: ports[0], probePort: ports[1], pprofPort: ports[2], leaderElect: true}, nil
}

// OperatorOptions describes one replica started by StartOperator.
type OperatorOptions struct {
	// Name names the replica and its log, LogDir/<Name>.log.
	Name, Binary, Kubeconfig, LogDir string
	// Env is added to the replica's environment.
	Env []string
	// Args are added after the flags the local profile always sets.
	Args []string
	// Pprof serves net/http/pprof on loopback (PprofURL).
	Pprof bool
	// SoleReplica runs without leader election, for benchmarks: their
	// saturated API server can answer a Lease renewal past its deadline,
	// and a leader that loses its Lease exits mid-run.
	SoleReplica bool
}

// StartOperator runs one replica and waits until it is ready. Tests and
// benchmarks use it to run an operator against a testbed they made.
func StartOperator(ctx context.Context, opts OperatorOptions) (*OperatorProcess, error) {
	op, err := newOperatorProcess(opts.Name, opts.Binary, opts.Kubeconfig, opts.LogDir)
	if err != nil {
		return nil, err
	}
	op.env, op.args, op.leaderElect = opts.Env, opts.Args, !opts.SoleReplica
	if opts.Pprof {
		op.args = append(op.args, "--pprof-bind-address=127.0.0.1:"+strconv.Itoa(op.pprofPort))
	}
	return op, op.Start(ctx)
}

// Start runs the process and waits until it is ready.
func (o *OperatorProcess) Start(ctx context.Context) error {
	logFile, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	o.cmd = exec.Command(o.binary,
		"--kubeconfig="+o.kubeconfig,
		"--leader-elect="+strconv.FormatBool(o.leaderElect), "--leader-election-namespace=default",
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(o.metricsPort),
		"--metrics-secure=false",
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(o.probePort),
	)
	o.cmd.Args = append(o.cmd.Args, o.args...)
	o.cmd.Stdout, o.cmd.Stderr = logFile, logFile
	if len(o.env) > 0 {
		o.cmd.Env = append(os.Environ(), o.env...)
	}
	if err := o.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", o.binary, err)
	}
	o.exited = make(chan struct{})
	go func() { _ = o.cmd.Wait(); logFile.Close(); close(o.exited) }()
	return o.waitReady(ctx)
}

func (o *OperatorProcess) waitReady(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", o.probePort)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-o.exited:
			return fmt.Errorf("operator %s exited at start (log: %s)", o.Name, o.logPath)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("operator %s not ready after 30s (log: %s)", o.Name, o.logPath)
}

// Kill sends SIGKILL, as a node failure or OOM would: no lease release.
func (o *OperatorProcess) Kill() error {
	if o.cmd == nil || o.cmd.Process == nil {
		return nil
	}
	if err := o.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-o.exited
	return nil
}

// Exited says, once the process has ended, that it did and where its log
// is; nil while it runs. A harness checks it between runs, so a run is not
// measured against an operator that is gone.
func (o *OperatorProcess) Exited() error {
	if o.exited == nil {
		return fmt.Errorf("operator %s was not started", o.Name)
	}
	select {
	case <-o.exited:
		return fmt.Errorf("operator %s exited (log: %s)", o.Name, o.logPath)
	default:
		return nil
	}
}

// Stop ends the process gracefully (it releases its lease).
func (o *OperatorProcess) Stop() error {
	if o.cmd == nil || o.cmd.Process == nil {
		return nil
	}
	select {
	case <-o.exited:
		return nil
	default:
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.exited:
	case <-time.After(15 * time.Second):
		return o.Kill()
	}
	return nil
}

// MetricsURL is the replica's /metrics.
func (o *OperatorProcess) MetricsURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", o.metricsPort)
}

// PprofURL is the replica's /debug/pprof/ (served with OperatorOptions.Pprof).
func (o *OperatorProcess) PprofURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", o.pprofPort)
}

// IsLeader reads controller-runtime's leader gauge from the replica.
func (o *OperatorProcess) IsLeader(ctx context.Context) bool {
	s, err := measure.ScrapeURL(ctx, o.MetricsURL())
	return err == nil && s.Sum("leader_election_master_status", nil) >= 1
}

// Ready says the replica's process runs and answers /readyz: a replica
// that can take the Lease over.
func (o *OperatorProcess) Ready(ctx context.Context) bool {
	if o.exited == nil {
		return false
	}
	select {
	case <-o.exited:
		return false
	default:
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", o.probePort), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Log is the replica's log file.
func (o *OperatorProcess) Log() string { return o.logPath }

// LeaseName is the operator's leader-election Lease.
const LeaseName = "gpulab-operator.gpulab.io"

// LeaseNamespace is where the operator's Lease lives: default for the
// local profile's processes, the operator's namespace on a cluster.
func (e *Environment) LeaseNamespace() string {
	if e.Profile == "local" {
		return "default"
	}
	return e.operatorNamespace
}

// LeaseHolder is the Lease's holder identity ("" when none).
func (e *Environment) LeaseHolder(ctx context.Context) string {
	var lease coordinationv1.Lease
	err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.LeaseNamespace(), Name: LeaseName}, &lease)
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// LeaderPod is the operator pod that holds the Lease on a cluster:
// controller-runtime's identity is <hostname>_<uuid>, and a pod's hostname
// is its name.
func (e *Environment) LeaderPod(ctx context.Context) (*corev1.Pod, error) {
	holder := e.LeaseHolder(ctx)
	if holder == "" {
		return nil, fmt.Errorf("the Lease %s/%s has no holder", e.LeaseNamespace(), LeaseName)
	}
	name := PodOfHolder(holder)
	var pod corev1.Pod
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.operatorNamespace, Name: name}, &pod); err != nil {
		return nil, fmt.Errorf("the Lease holder %q is not a pod in %s: %w", holder, e.operatorNamespace, err)
	}
	return &pod, nil
}

// Standbys are the operator pods, other than leader, that could take the
// Lease over now (ReadyStandbys of the operator namespace's pods).
func (e *Environment) Standbys(ctx context.Context, leader *corev1.Pod) ([]string, error) {
	var pods corev1.PodList
	if err := e.Client.List(ctx, &pods, client.InNamespace(leader.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the operator's pods in %s: %w", leader.Namespace, err)
	}
	return ReadyStandbys(leader, pods.Items), nil
}

// perPodLabels are the labels a controller adds that differ between the
// replicas of one workload.
var perPodLabels = map[string]bool{
	"pod-template-hash": true, "controller-revision-hash": true,
	"statefulset.kubernetes.io/pod-name": true, "apps.kubernetes.io/pod-index": true,
}

// ReadyStandbys are the pods among pods that are replicas of the leader's
// workload (every label of the leader's but the per-pod ones), not the
// leader, not being deleted and Ready. A leader without labels has no
// replicas that can be told apart from other pods: none.
func ReadyStandbys(leader *corev1.Pod, pods []corev1.Pod) []string {
	want := map[string]string{}
	for k, v := range leader.Labels {
		if !perPodLabels[k] {
			want[k] = v
		}
	}
	if len(want) == 0 {
		return nil
	}
	var out []string
	for i := range pods {
		p := &pods[i]
		if p.Name == leader.Name || p.DeletionTimestamp != nil || !podReady(p) {
			continue
		}
		match := true
		for k, v := range want {
			if p.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, p.Name)
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodOfHolder is the pod name in a controller-runtime Lease holder identity.
func PodOfHolder(holder string) string {
	name, _, _ := strings.Cut(holder, "_")
	return name
}

// operatorVersion is what the operator under test says it is: the local
// binary's --version, or the image of the leading pod on a cluster.
func (e *Environment) operatorVersion(ctx context.Context) string {
	if e.operatorBinary != "" {
		out, err := exec.CommandContext(ctx, e.operatorBinary, "--version").Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	pod, err := e.LeaderPod(ctx)
	if err != nil || len(pod.Spec.Containers) == 0 {
		return ""
	}
	return pod.Spec.Containers[0].Image
}

// PID is the replica's process id (0 before Start).
func (o *OperatorProcess) PID() int {
	if o.cmd == nil || o.cmd.Process == nil {
		return 0
	}
	return o.cmd.Process.Pid
}
