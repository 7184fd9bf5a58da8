package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpulab/gpulab/conformance/results"
)

// DefaultWorkload is the suite's --workload unless a run names another.
const DefaultWorkload = "gpucluster"

// SuiteRun is one run of the conformance suite on a bed: by default the
// latency feature's burst of Bed.Scale gangs (latencyRun).
type SuiteRun struct {
	// Out is the run's directory, where the suite writes results.json
	// (required).
	Out string
	// Workload is the suite's --workload (default DefaultWorkload).
	Workload string
	// Scale is the suite's --scale (default the bed's Scale).
	Scale int
	// Features, when set, runs these features (a --feature pattern) with
	// all their assessments instead of the latency feature's burst only.
	Features string
	// OperatorMetricsURL is the suite's --operator-metrics-url: the
	// operator whose costs the run reports ("" for none, as for the
	// floor).
	OperatorMetricsURL string
	// Extra are further flags of the suite (e.g. --timeout).
	Extra []string
	// CPU names the processes (name to pid) whose CPU the run records over
	// its whole length (default none).
	CPU map[string]int
	// SampleEvery, when set, also samples CPU's processes, the suite's own
	// (SuiteProcess) and the machine every interval while the suite runs
	// (Outcome.Samples).
	SampleEvery time.Duration
}

// Outcome is what one run of the suite left.
type Outcome struct {
	// Results are the suite's results.json; nil when it could not be read.
	Results *results.Results
	// Err is the suite's own failure, its exit status: the results say
	// what failed.
	Err error
	// CPUSeconds is the CPU each process of SuiteRun.CPU spent from just
	// before the suite started to just after it ended (absent for one not
	// running at both ends), and the suite's own under SuiteProcess.
	CPUSeconds map[string]float64
	// Samples are the CPU samples of SuiteRun.SampleEvery, oldest first.
	Samples []CPUSample
}

// RunSuite runs the suite on the bed, its output to Options.Log, and reads
// its results. The outcome is nil only when the suite did not start (or
// the bed's operator has exited, so that no run is measured against an
// operator that is gone); the error also says when its results could not
// be read, with the suite's own failure.
func (b *Bed) RunSuite(ctx context.Context, run SuiteRun) (*Outcome, error) {
	if run.Out == "" {
		return nil, errors.New("the run's output directory is required")
	}
	if b.Operator != nil {
		if err := b.Operator.Exited(); err != nil {
			return nil, err
		}
	}
	if run.Workload == "" {
		run.Workload = DefaultWorkload
	}
	if run.Scale == 0 {
		run.Scale = b.Scale
	}
	cmd := latencyRun{Suite: b.opts.Suite, Kubeconfig: b.Testbed.Kubeconfig(), Workload: run.Workload, Scale: run.Scale,
		Features: run.Features, OperatorMetricsURL: run.OperatorMetricsURL, Out: run.Out, ClusterName: b.Testbed.Name(),
		Extra: run.Extra}.command(ctx)
	cmd.Stdout, cmd.Stderr = b.opts.Log, b.opts.Log
	before := CPUSeconds(run.CPU)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the suite: %w", err)
	}
	var sampler *Sampler
	if run.SampleEvery > 0 {
		sampled := maps.Clone(run.CPU)
		if sampled == nil {
			sampled = map[string]int{}
		}
		sampled[SuiteProcess] = cmd.Process.Pid
		sampler = SampleCPU(sampled, run.SampleEvery)
	}
	out := &Outcome{Err: cmd.Wait(), CPUSeconds: map[string]float64{}}
	if sampler != nil {
		out.Samples = sampler.Stop()
	}
	after := CPUSeconds(run.CPU)
	for name, end := range after {
		// A process that exited during the run (a component that lost its
		// lease) has no total to subtract from.
		if start, ok := before[name]; ok {
			out.CPUSeconds[name] = end - start
		}
	}
	if st := cmd.ProcessState; st != nil {
		out.CPUSeconds[SuiteProcess] = (st.UserTime() + st.SystemTime()).Seconds()
	}
	r, err := results.Read(filepath.Join(run.Out, "results.json"))
	if err != nil {
		return out, errors.Join(out.Err, err)
	}
	out.Results = r
	return out, nil
}

// latencyRun is one run of the suite's burst assessment against an
// operator on a testbed the caller made, as the benchmarks run it.
type latencyRun struct {
	Suite, Kubeconfig, Workload, OperatorMetricsURL, Out, ClusterName string
	Scale                                                             int
	// Features, when set, runs these features (a --feature pattern) with
	// all their assessments instead of the latency feature's burst only.
	Features string
	// Extra are further flags (e.g. --timeout).
	Extra []string
}

// command is the suite's command line for the run: the latency feature's
// "clusters created at once" only (or every assessment of Features),
// every GPU of the testbed, the suite's own client at 500 QPS so the
// burst goes out at once.
func (r latencyRun) command(ctx context.Context) *exec.Cmd {
	features := []string{"--feature=^latency$", "--assess=clusters created at once"}
	if r.Features != "" {
		features = []string{"--feature=" + r.Features}
	}
	args := append([]string{"run", "--profile=cluster", "--kubeconfig=" + r.Kubeconfig, "--workload=" + r.Workload}, features...)
	args = append(args, "--scale="+strconv.Itoa(r.Scale),
		"--max-gpus=all", "--operator-namespace=default", "--operator-metrics-url="+r.OperatorMetricsURL, "--out="+r.Out,
		"--cluster-name="+r.ClusterName, "--client-qps=500")
	return exec.CommandContext(ctx, r.Suite, append(args, r.Extra...)...)
}
