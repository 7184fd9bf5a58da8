// Package benchscale measures how gpulab's operator scales: for each N it
// brings up a local testbed sized for N gangs, runs the operator with
// pprof on, measures N gangs created at once with the suite's latency
// feature, and records the CPU every testbed process spent, the operator's
// CPU, heap and block profiles, the API server's CPU profile and what it
// served, and the suite's results. Report renders the tables and one SVG
// plot per metric against N.
package benchscale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// DefaultScales are the gang counts `make bench-scale` measures.
var DefaultScales = []int{10, 100, 300, 1000}

// Options configures a scaling run.
type Options struct {
	// Scales are the gang counts, one testbed each (default DefaultScales).
	Scales []int
	// Suite and Operator are the gpulab-conformance and gpulab-operator
	// binaries (required).
	Suite, Operator string
	// Out receives n-<N>/ per scale (results, profiles, logs), report.md
	// and the plots (required).
	Out string
	// TestbedName names the testbeds (default gpulab-bench-scale).
	TestbedName string
	// Log receives progress and the suite's output (default io.Discard).
	Log io.Writer
}

func (o *Options) defaults() error {
	if len(o.Scales) == 0 {
		o.Scales = DefaultScales
	}
	if o.TestbedName == "" {
		o.TestbedName = "gpulab-bench-scale"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, n := range o.Scales {
		if n < 1 {
			return fmt.Errorf("every scale must be at least 1, got %d", n)
		}
	}
	if o.Suite == "" || o.Operator == "" || o.Out == "" {
		return errors.New("the suite and operator binaries and an output directory are required")
	}
	return nil
}

// Point is one scale's measurements.
type Point struct {
	N       int
	Nodes   int
	Results *results.Results
	// CPUSeconds is the CPU each process spent during the suite's run:
	// the operator and every testbed component.
	CPUSeconds map[string]float64
	// APIRequests is what the API server served during the run, by kind
	// (apiserver.go).
	APIRequests map[string]float64
	// Burst is the CPU spent while the gangs came up (nil where the run
	// recorded no window), and AtRest the testbed's before the run, with
	// its nodes, leases and inventories but no gangs.
	Burst, AtRest *CPUWindow
}

// cpuSampleInterval is how often the CPU is sampled during the suite's
// run; the burst window is widened to whole samples.
const cpuSampleInterval = time.Second

// atRestWindow is how long the testbed's CPU at rest is sampled.
const atRestWindow = 10 * time.Second

// atRest samples the CPU of the testbed with nothing to do but keep its
// nodes, leases and inventories: the share of the machine the burst
// cannot have.
func atRest(ctx context.Context, procs map[string]int) (*CPUWindow, error) {
	sampler := sampleCPU(procs, cpuSampleInterval)
	timer := time.NewTimer(atRestWindow)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	samples := sampler.Stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, ok := windowOf(samples, samples[0].At, samples[len(samples)-1].At)
	if !ok {
		return nil, errors.New("no CPU samples at rest")
	}
	return &b, nil
}

// latencyWindow is when the latency feature's gangs came up: from its
// first create to the last milestone seen, the last GPUCluster Ready
// when every gang got there.
func latencyWindow(r *results.Results) (from, to time.Time, ok bool) {
	origin, ok := r.TimelineOrigins["latency"]
	if !ok {
		return time.Time{}, time.Time{}, false
	}
	end := 0.0
	for _, t := range r.Timelines {
		if t.Feature != "latency" {
			continue
		}
		for _, at := range []float64{t.StatusReady, t.PodsReady, t.AllBound, t.PodsCreated, t.PodGroup} {
			if at >= 0 {
				end = max(end, t.Start+at)
				break
			}
		}
	}
	return origin, origin.Add(time.Duration(end * float64(time.Second))), end > 0
}

// Run measures every scale in turn and writes report.md and the plots.
// A scale whose run fails still lands in the report (its verdict says
// so) and fails Run at the end, so one bad scale does not hide the rest.
func Run(ctx context.Context, opts Options) ([]Point, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	var points []Point
	var errs []error
	for _, n := range opts.Scales {
		p, err := runScale(ctx, opts, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("at %d gangs: %w", n, err))
		}
		if p != nil {
			points = append(points, *p)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := WriteReport(opts.Out, points); err != nil {
		errs = append(errs, err)
	}
	return points, errors.Join(errs...)
}

func runScale(ctx context.Context, opts Options, n int) (*Point, error) {
	out := filepath.Join(opts.Out, fmt.Sprintf("n-%d", n))
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	fleet, err := profile.LocalFleet(profile.Options{Scale: n})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "bench-scale: N=%d on %d nodes\n", n, len(fleet.Nodes()))
	tb, err := local.New(local.Options{Name: opts.TestbedName, Fleet: fleet, Log: opts.Log, ReadyTimeout: 10 * time.Minute})
	if err != nil {
		return nil, err
	}
	if err := tb.Up(ctx); err != nil {
		return nil, errors.Join(err, tb.Down(context.WithoutCancel(ctx)))
	}
	defer func() { _ = tb.Down(context.WithoutCancel(ctx)) }()
	// One operator, without leader election: at 1,000 gangs the saturated
	// API server answered a lease renewal after its deadline, and a leader
	// that cannot renew exits, as it should. Throughput, not failover, is
	// measured here.
	op, err := profile.StartOperator(ctx, profile.OperatorOptions{Name: "gpulab-operator", Binary: opts.Operator,
		Kubeconfig: tb.Kubeconfig(), LogDir: out, Pprof: true, SoleReplica: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = op.Stop() }()
	c, err := tb.Client()
	if err != nil {
		return nil, err
	}
	if err := warmUp(ctx, c); err != nil {
		return nil, err
	}
	procs, err := processes(ctx, tb, op)
	if err != nil {
		return nil, err
	}

	rest, err := atRest(ctx, procs)
	if err != nil {
		return nil, err
	}
	api, err := newAPIServer(tb)
	if err != nil {
		return nil, err
	}
	requestsBefore, err := api.requests(ctx)
	if err != nil {
		return nil, err
	}
	before := cpuSeconds(procs)
	// The CPU profiles cover the burst: setup, creation, binding and
	// readiness take well under this at every scale measured.
	cpuProfiles := make(chan error, 2)
	go func() {
		cpuProfiles <- fetch(ctx, op.PprofURL()+"profile?seconds="+strconv.Itoa(profileSeconds(n)), filepath.Join(out, "cpu.pprof"))
	}()
	go func() {
		cpuProfiles <- api.cpuProfile(ctx, profileSeconds(n), filepath.Join(out, "kube-apiserver.cpu.pprof"))
	}()
	cmd := profile.LatencyRun{Suite: opts.Suite, Kubeconfig: tb.Kubeconfig(), Workload: "gpucluster", Scale: n,
		OperatorMetricsURL: op.MetricsURL(), Out: out, ClusterName: opts.TestbedName, Extra: []string{"--timeout=60m", "--ready-timeout=" + readyTimeout(n).String()}}.Command(ctx)
	cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
	peakCtx, stopPeak := context.WithCancel(ctx)
	peakHeap := make(chan error, 1)
	go func() { peakHeap <- heapAtPeak(peakCtx, op, n, filepath.Join(out, peakHeapFile)) }()
	if err := cmd.Start(); err != nil {
		stopPeak()
		return nil, fmt.Errorf("starting the suite: %w", err)
	}
	sampled := maps.Clone(procs)
	sampled[suiteProcess] = cmd.Process.Pid
	sampler := sampleCPU(sampled, cpuSampleInterval)
	runErr := cmd.Wait()
	samples := sampler.Stop()
	stopPeak()
	after := cpuSeconds(procs)
	requestsAfter, requestsErr := api.requests(ctx)
	var profErrs []error
	for _, p := range []string{"heap", "block", "mutex"} {
		profErrs = append(profErrs, fetch(ctx, op.PprofURL()+p, filepath.Join(out, p+".pprof")))
	}
	profErrs = append(profErrs, <-cpuProfiles, <-cpuProfiles, <-peakHeap, requestsErr)

	r, readErr := results.Read(filepath.Join(out, "results.json"))
	if readErr != nil {
		return nil, errors.Join(runErr, readErr)
	}
	p := &Point{N: n, Nodes: len(fleet.Nodes()), Results: r, CPUSeconds: map[string]float64{}, AtRest: rest}
	profErrs = append(profErrs, writeJSON(filepath.Join(out, atRestFile), rest))
	if requestsErr == nil {
		p.APIRequests = delta(requestsBefore, requestsAfter)
		profErrs = append(profErrs, writeJSON(filepath.Join(out, apiRequestsFile), p.APIRequests))
	}
	for name := range procs {
		// A process that exited during the run (a component that lost its
		// lease) has no total to subtract from.
		if end, ok := after[name]; ok {
			p.CPUSeconds[name] = end - before[name]
		}
	}
	if st := cmd.ProcessState; st != nil {
		p.CPUSeconds[suiteProcess] = (st.UserTime() + st.SystemTime()).Seconds()
	}
	profErrs = append(profErrs, writeJSON(filepath.Join(out, cpuSecondsFile), p.CPUSeconds))
	if from, to, ok := latencyWindow(r); ok {
		if b, ok := windowOf(samples, from, to); ok {
			p.Burst = &b
			profErrs = append(profErrs, writeJSON(filepath.Join(out, burstFile), b))
		}
	}
	if err := errors.Join(profErrs...); err != nil {
		fmt.Fprintf(opts.Log, "bench-scale: N=%d: a profile is missing: %v\n", n, err)
	}
	if runErr != nil {
		return p, fmt.Errorf("the suite's run: %w", runErr)
	}
	return p, nil
}

// readyTimeout is how long the burst's gangs may take to be Ready: the
// suite's default (2 minutes, plus time per gang) is for a conformance
// verdict; a benchmark on a saturated 2-core testbed records however long
// it takes, within reason.
func readyTimeout(n int) time.Duration {
	return max(2*time.Minute, time.Duration(n)*time.Second)
}

// profileSeconds is how long the CPU profile runs at N gangs: the suite's
// setup plus the burst, measured at about 10 s + 0.1 s per gang here.
func profileSeconds(n int) int {
	return min(20+n/5, 600)
}

// processes maps the names of the processes to measure to their pids.
func processes(ctx context.Context, tb *local.Testbed, op *profile.OperatorProcess) (map[string]int, error) {
	st, err := tb.Status(ctx)
	if err != nil {
		return nil, err
	}
	procs := map[string]int{"gpulab-operator": op.PID()}
	for _, c := range st.Components {
		if c.Running {
			procs[c.Name] = c.PID
		}
	}
	return procs, nil
}

// fetch saves url's body to path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
