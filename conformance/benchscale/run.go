// Package benchscale measures how gpulab's operator scales: for each N it
// brings up a local testbed sized for N gangs, runs the operator with
// pprof on, measures N gangs created at once with the suite's latency
// feature, and records the CPU every testbed process spent, the operator's
// CPU, heap and block profiles, the API server's CPU profile and what it
// served, and the suite's results, on the benchmarks' harness
// (conformance/bench). Report renders the tables and one SVG plot per
// metric against N.
package benchscale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpulab/gpulab/conformance/bench"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/testbeds/local"
)

// DefaultScales are the gang counts `make bench-scale` measures.
var DefaultScales = []int{10, 100, 300, 1000}

// DefaultTestbedName names the testbeds unless Options say otherwise.
const DefaultTestbedName = "gpulab-bench-scale"

// Options configures a scaling run.
type Options struct {
	// Options are the binaries, the testbeds' name (default
	// DefaultTestbedName) and the log; Out receives n-<N>/ per scale
	// (results, profiles, logs), report.md and the plots.
	bench.Options
	// Scales are the gang counts, one testbed each (default DefaultScales).
	Scales []int
}

func (o *Options) defaults() error {
	if len(o.Scales) == 0 {
		o.Scales = DefaultScales
	}
	if err := bench.CheckScales(o.Scales); err != nil {
		return err
	}
	return o.Defaults(DefaultTestbedName)
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
	Burst, AtRest *bench.CPUWindow
}

// cpuSampleInterval is how often the CPU is sampled during the suite's
// run; the burst window is widened to whole samples.
const cpuSampleInterval = time.Second

// atRestWindow is how long the testbed's CPU at rest is sampled.
const atRestWindow = 10 * time.Second

// atRest samples the CPU of the testbed with nothing to do but keep its
// nodes, leases and inventories: the share of the machine the burst
// cannot have.
func atRest(ctx context.Context, procs map[string]int) (*bench.CPUWindow, error) {
	sampler := bench.SampleCPU(procs, cpuSampleInterval)
	timer := time.NewTimer(atRestWindow)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	samples := sampler.Stop()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sampling the testbed at rest: %w", err)
	}
	b, ok := bench.WindowOf(samples, samples[0].At, samples[len(samples)-1].At)
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
	fleet, err := profile.LocalFleet(profile.Options{Scale: n})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "bench-scale: N=%d on %d nodes\n", n, len(fleet.Nodes()))
	bed, err := opts.Up(ctx, bench.BedOptions{Scale: n, Testbed: local.Options{Fleet: fleet, ReadyTimeout: 10 * time.Minute},
		Operator: profile.OperatorOptions{LogDir: out, Pprof: true}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = bed.Down(ctx) }()
	op := bed.Operator
	c, err := bed.Testbed.Client()
	if err != nil {
		return nil, err
	}
	if err := warmUp(ctx, c); err != nil {
		return nil, err
	}
	procs := bed.Processes()
	rest, err := atRest(ctx, procs)
	if err != nil {
		return nil, err
	}
	api, err := newAPIServer(bed.Testbed)
	if err != nil {
		return nil, err
	}
	requestsBefore, err := api.requests(ctx)
	if err != nil {
		return nil, err
	}
	// The CPU profiles cover the burst: setup, creation, binding and
	// readiness take well under this at every scale measured.
	cpuProfiles := make(chan error, 2)
	go func() {
		cpuProfiles <- fetch(ctx, op.PprofURL()+"profile?seconds="+strconv.Itoa(profileSeconds(n)), filepath.Join(out, "cpu.pprof"))
	}()
	go func() {
		cpuProfiles <- api.cpuProfile(ctx, profileSeconds(n), filepath.Join(out, "kube-apiserver.cpu.pprof"))
	}()
	peakCtx, stopPeak := context.WithCancel(ctx)
	peakHeap := make(chan error, 1)
	go func() { peakHeap <- heapAtPeak(peakCtx, op, n, filepath.Join(out, peakHeapFile)) }()
	run, err := bed.RunSuite(ctx, bench.SuiteRun{Out: out, OperatorMetricsURL: op.MetricsURL(), CPU: procs, SampleEvery: cpuSampleInterval,
		Extra: []string{"--timeout=60m", "--ready-timeout=" + readyTimeout(n).String()}})
	stopPeak()
	if run == nil {
		return nil, err
	}
	requestsAfter, requestsErr := api.requests(ctx)
	var profErrs []error
	for _, p := range []string{"heap", "block", "mutex"} {
		profErrs = append(profErrs, fetch(ctx, op.PprofURL()+p, filepath.Join(out, p+".pprof")))
	}
	profErrs = append(profErrs, <-cpuProfiles, <-cpuProfiles, <-peakHeap, requestsErr)
	if err != nil { // the results could not be read
		return nil, err
	}
	p := &Point{N: n, Nodes: bed.Nodes, Results: run.Results, CPUSeconds: run.CPUSeconds, AtRest: rest}
	profErrs = append(profErrs, writeJSON(filepath.Join(out, atRestFile), rest))
	if requestsErr == nil {
		p.APIRequests = delta(requestsBefore, requestsAfter)
		profErrs = append(profErrs, writeJSON(filepath.Join(out, apiRequestsFile), p.APIRequests))
	}
	profErrs = append(profErrs, writeJSON(filepath.Join(out, cpuSecondsFile), p.CPUSeconds))
	if from, to, ok := latencyWindow(run.Results); ok {
		if b, ok := bench.WindowOf(run.Samples, from, to); ok {
			p.Burst = &b
			profErrs = append(profErrs, writeJSON(filepath.Join(out, burstFile), b))
		}
	}
	if err := errors.Join(profErrs...); err != nil {
		fmt.Fprintf(opts.Log, "bench-scale: N=%d: a profile is missing: %v\n", n, err)
	}
	if run.Err != nil {
		return p, fmt.Errorf("the suite's run: %w", run.Err)
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
