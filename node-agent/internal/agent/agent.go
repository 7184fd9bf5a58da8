package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/internal/health"
	"github.com/gpulab/gpulab/node-agent/internal/inventory"
	"github.com/gpulab/gpulab/node-agent/internal/labels"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

// Publisher writes a node's state; *publisher.Publisher is one.
type Publisher interface {
	// Load returns the status stored for node, nil when there is none.
	Load(ctx context.Context, node string) (*v1alpha1.GPUInventoryStatus, error)
	// Publish writes whatever part of s changed.
	Publish(ctx context.Context, node string, s publisher.State) error
	// WatchClearHealth calls f with the value of the node's
	// v1alpha1.ClearHealthAnnotation ("" without one) whenever it may have
	// changed, until ctx is done.
	WatchClearHealth(ctx context.Context, node string, f func(value string)) error
	// ClearHealthDone removes the node's v1alpha1.ClearHealthAnnotation if it
	// still holds value.
	ClearHealthDone(ctx context.Context, node, value string) error
}

var _ Publisher = (*publisher.Publisher)(nil)

// Options configures an Agent.
type Options struct {
	// NodeName names the node and its GPUInventory. Required.
	NodeName string
	// Interval is the time between scans when nothing happens. Defaults to
	// 30s.
	Interval time.Duration
	// IgnoredXIDs leave a GPU healthy. Nil means health.DefaultIgnoredXIDs.
	IgnoredXIDs []uint64
	// AllowNoGPU publishes an empty inventory on a node without a driver,
	// retrying NVML every Interval, instead of failing. Defaults to false.
	AllowNoGPU bool
	// Publisher writes each scan's result; nil writes nothing.
	Publisher Publisher
	// Metrics receives GPU gauges and scan metrics; nil exports nothing.
	Metrics *metrics.Metrics
	// Log defaults to logr.Discard().
	Log logr.Logger
	// Now defaults to time.Now.
	Now func() time.Time
	// OnPublished, when set, is called after every successful publish.
	OnPublished func()
	// OnScanned, when set, is called with every scan's result, whether or
	// not it is published, but those of scans that failed outright before
	// UnhealthyAfterFailedScans in a row (they say nothing new about the
	// GPUs); the device plugin follows it.
	OnScanned func(*Result)
	// UnhealthyAfterFailedScans is how many NVML scans in a row may fail
	// before the node's GPUs stop counting as healthy: Unknown in the
	// inventory (sticky verdicts kept), a summary of none healthy, and not
	// Healthy in OnScanned's result, until a scan succeeds. Defaults to 3;
	// negative never.
	UnhealthyAfterFailedScans int
}

// Agent scans one node's GPUs and publishes them.
type Agent struct {
	backend nvml.Backend
	opts    Options
	tracker *health.Tracker
	log     logr.Logger

	trigger chan struct{}
	// clears carries the latest clear-health annotation value from the watch.
	clears chan string
	// last is the status built by the last scan (or loaded from the API
	// server); only the Run goroutine touches it, and loaded and clear.
	last   *v1alpha1.GPUInventoryStatus
	loaded bool
	clear  clearRequest
	// failedScans counts the scans in a row that failed (Run goroutine).
	failedScans int

	mu       sync.Mutex
	snapshot *Result
}

// Result is what one scan produced.
type Result struct {
	// Snapshot is the NVML scan, nil without a driver or when it failed.
	Snapshot *nvml.Snapshot
	// State is what is published.
	State publisher.State
}

// clearRequest is the clear-health annotation being served.
type clearRequest struct {
	value string
	// seen is when value was first seen. Only verdicts recorded before then
	// are cleared, so serving a request again never clears a newer event.
	seen time.Time
	// removed means the annotation was removed after the clear was
	// published; the request ends when the watch sees it gone.
	removed bool
}

// New returns an Agent reading b.
func New(b nvml.Backend, opts Options) (*Agent, error) {
	if opts.NodeName == "" {
		return nil, errors.New("agent: NodeName is required")
	}
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.UnhealthyAfterFailedScans == 0 {
		opts.UnhealthyAfterFailedScans = 3
	}
	return &Agent{
		backend: b,
		opts:    opts,
		tracker: health.NewTracker(health.Options{IgnoredXIDs: opts.IgnoredXIDs, Now: opts.Now}),
		log:     opts.Log.WithValues("node", opts.NodeName),
		trigger: make(chan struct{}, 1),
		clears:  make(chan string, 1),
	}, nil
}

// Rescan asks a running agent to scan now.
func (a *Agent) Rescan() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Last returns the last scan's result, nil before the first.
func (a *Agent) Last() *Result {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snapshot
}

// Inventory initialises NVML, scans once, shuts NVML down and returns the
// node's GPUInventory. Without a driver it fails unless AllowNoGPU is set.
func (a *Agent) Inventory() (*v1alpha1.GPUInventory, error) {
	noDriver, err := a.init()
	if err != nil {
		return nil, err
	}
	if noDriver == "" {
		defer func() {
			if err := a.backend.Shutdown(); err != nil {
				a.log.Error(err, "NVML shutdown")
			}
		}()
	}
	r := a.scan(noDriver)
	if c := findReady(r.State.Status.Conditions); c != nil && c.Status != metav1.ConditionTrue {
		return nil, errors.New(c.Message)
	}
	return &v1alpha1.GPUInventory{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUInventory"},
		ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName},
		Status:     r.State.Status,
	}, nil
}

func findReady(conds []metav1.Condition) *metav1.Condition {
	return meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
}

// init initialises NVML. With AllowNoGPU, a node without a driver is not an
// error: init returns why instead.
func (a *Agent) init() (noDriver string, err error) {
	err = a.backend.Init()
	if err == nil {
		return "", nil
	}
	if a.opts.AllowNoGPU && errors.Is(err, nvml.ErrNoDriver) {
		return err.Error(), nil
	}
	return "", err
}

// Run scans and publishes until ctx is done. It fails at once if NVML cannot
// be initialised (unless AllowNoGPU covers it); after that, failures are
// logged, published in the Ready condition and retried.
func (a *Agent) Run(ctx context.Context) error {
	noDriver, err := a.init()
	if err != nil {
		return err
	}
	if noDriver != "" {
		a.log.Info("no NVIDIA driver; publishing an empty inventory and retrying", "reason", noDriver, "interval", a.opts.Interval)
	}
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	events := make(chan nvml.Event, 64)
	startWatch := func() {
		wg.Go(func() { a.watch(watchCtx, events) })
	}
	defer func() {
		stopWatch()
		wg.Wait()
		if noDriver == "" {
			if err := a.backend.Shutdown(); err != nil {
				a.log.Error(err, "NVML shutdown")
			}
		}
	}()
	if noDriver == "" {
		startWatch()
	}
	if p := a.opts.Publisher; p != nil {
		wg.Go(func() { a.watchClears(watchCtx, p) })
	}

	backoff := time.Duration(0)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-events:
			if a.observe(e) {
				resetTimer(timer, 0)
			}
			continue
		case <-a.trigger:
			resetTimer(timer, 0)
			continue
		case v := <-a.clears:
			if a.noteClear(v) {
				resetTimer(timer, 0)
			}
			continue
		case <-timer.C:
		}
		if noDriver != "" {
			if err := a.backend.Init(); err == nil {
				a.log.Info("NVIDIA driver found; scanning GPUs")
				noDriver = ""
				startWatch()
			}
		}
		next := a.opts.Interval
		if err := a.sync(ctx, noDriver); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, time.Second), a.opts.Interval)
			next = backoff
			a.log.Error(err, "publishing; retrying", "after", next)
		} else {
			backoff = 0
		}
		resetTimer(timer, next)
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}

// watch streams health events, re-establishing the event set after errors.
func (a *Agent) watch(ctx context.Context, events chan<- nvml.Event) {
	for ctx.Err() == nil {
		err := a.backend.Watch(ctx, events)
		if err == nil || ctx.Err() != nil {
			return
		}
		a.log.Error(err, "watching NVML events; retrying", "after", a.opts.Interval)
		select {
		case <-ctx.Done():
		case <-time.After(a.opts.Interval):
		}
	}
}

// observe records a health event and reports whether to rescan.
func (a *Agent) observe(e nvml.Event) bool {
	ignored := e.Kind == nvml.EventXID && a.tracker.Ignored(e.XID)
	if m := a.opts.Metrics; m != nil {
		m.HealthEvents.WithLabelValues(e.Kind.String(), strconv.FormatBool(ignored)).Inc()
	}
	a.log.Info("NVML health event", "kind", e.Kind.String(), "uuid", e.UUID, "xid", e.XID, "ignored", ignored)
	return a.tracker.Observe(e)
}

// scan reads NVML and builds the node's state.
func (a *Agent) scan(noDriver string) *Result {
	in := a.read(noDriver)
	a.identifyLost(in.Snapshot)
	return a.build(in)
}

// sync scans and publishes: the first time it reads back what was published
// before (times and sticky health), and it serves clear-health requests.
func (a *Agent) sync(ctx context.Context, noDriver string) error {
	in := a.read(noDriver)
	p := a.opts.Publisher
	var loadErr error
	if p != nil && !a.loaded {
		// Publishing before loading would overwrite the sticky verdicts of
		// the last run with Healthy.
		loadErr = a.load(ctx, p)
	}
	a.identifyLost(in.Snapshot)
	if p == nil || loadErr != nil {
		a.build(in) // gauges and Last still follow NVML
		return loadErr
	}
	serving := a.serveClear(in)
	r := a.build(in)
	if err := p.Publish(ctx, a.opts.NodeName, r.State); err != nil {
		return fmt.Errorf("node %s: %w", a.opts.NodeName, err)
	}
	if a.opts.OnPublished != nil {
		a.opts.OnPublished()
	}
	if serving {
		// Only now that the cleared status is stored: removed earlier, a
		// restart would restore the verdicts from the old status.
		if err := p.ClearHealthDone(ctx, a.opts.NodeName, a.clear.value); err != nil {
			return fmt.Errorf("node %s: %w", a.opts.NodeName, err)
		}
		a.clear.removed = true
	}
	return nil
}

// load reads the status published before, so that a restarted agent keeps
// the published times and the sticky health verdicts.
func (a *Agent) load(ctx context.Context, p Publisher) error {
	prev, err := p.Load(ctx, a.opts.NodeName)
	if err != nil {
		return fmt.Errorf("node %s: %w", a.opts.NodeName, err)
	}
	a.loaded = true
	if prev == nil {
		return nil
	}
	a.last = prev
	if uuids := a.tracker.Restore(prev.GPUs); len(uuids) > 0 {
		a.log.Info("restored sticky GPU health from the GPUInventory", "gpus", uuids)
	}
	return nil
}

// read scans NVML.
func (a *Agent) read(noDriver string) inventory.Input {
	in := inventory.Input{NoDriver: noDriver, Now: a.opts.Now(), UnhealthyAfter: max(a.opts.UnhealthyAfterFailedScans, 0)}
	if noDriver != "" {
		a.failedScans = 0
		return in
	}
	start := time.Now()
	s, err := a.backend.Snapshot()
	if m := a.opts.Metrics; m != nil {
		m.ScanDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			m.ScanErrors.Inc()
		}
	}
	if err != nil {
		a.failedScans++
		a.log.Error(err, "NVML scan failed", "inARow", a.failedScans)
		in.ScanError = err
	} else {
		a.failedScans = 0
		in.Snapshot = s
	}
	in.FailedScans = a.failedScans
	return in
}

// identifyLost gives a lost GPU, which NVML no longer identifies, the UUID
// last published at its index (a lost GPU keeps its index until the driver
// reloads), so that its sticky verdict stays attached to it.
func (a *Agent) identifyLost(s *nvml.Snapshot) {
	if s == nil || a.last == nil {
		return
	}
	for i := range s.Devices {
		d := &s.Devices[i]
		if !d.Lost || d.UUID != "" {
			continue
		}
		for _, g := range a.last.GPUs {
			if int(g.Index) == d.Index {
				d.UUID = g.UUID
			}
		}
	}
}

// noteClear records the clear-health annotation's value and reports whether
// there is a new request to serve.
func (a *Agent) noteClear(v string) bool {
	if v == a.clear.value {
		return false // the same request, e.g. seen again after it was served
	}
	a.clear = clearRequest{value: v, seen: a.opts.Now()}
	return v != ""
}

// serveClear clears the sticky verdicts the pending request names and
// reports whether it did. It waits for a successful scan: the status of a
// failed one keeps the old verdicts.
func (a *Agent) serveClear(in inventory.Input) bool {
	c := a.clear
	if c.value == "" || c.removed || in.ScanError != nil {
		return false
	}
	all, uuids := parseClear(c.value)
	var present []string
	if s := in.Snapshot; s != nil {
		for i := range s.Devices {
			present = append(present, s.Devices[i].UUID)
		}
	}
	cleared := a.tracker.Clear(all, uuids, c.seen, present)
	a.log.Info("clearing sticky GPU health on request", "annotation", v1alpha1.ClearHealthAnnotation,
		"request", c.value, "cleared", cleared)
	return true
}

// parseClear reads a clear-health value: "all" or comma-separated UUIDs.
func parseClear(v string) (all bool, uuids []string) {
	for item := range strings.SplitSeq(v, ",") {
		switch item = strings.TrimSpace(item); item {
		case "":
		case "all":
			all = true
		default:
			uuids = append(uuids, item)
		}
	}
	return all, uuids
}

// watchClears feeds clear-health requests to Run, re-establishing the watch
// after errors.
func (a *Agent) watchClears(ctx context.Context, p Publisher) {
	offer := func(v string) {
		// Latest wins: a value Run has not taken yet is outdated.
		select {
		case <-a.clears:
		default:
		}
		a.clears <- v
	}
	for ctx.Err() == nil {
		err := p.WatchClearHealth(ctx, a.opts.NodeName, offer)
		if err == nil || ctx.Err() != nil {
			return
		}
		a.log.Error(err, "watching the GPUInventory for clear-health requests; retrying", "after", a.opts.Interval)
		select {
		case <-ctx.Done():
		case <-time.After(a.opts.Interval):
		}
	}
}

// build evaluates health and builds the node's state from in.
func (a *Agent) build(in inventory.Input) *Result {
	in.Previous = a.last
	snap := in.Snapshot
	if snap != nil {
		// Until the last run's inventory is read, a GPU it published sick
		// (sticky) would look healthy.
		unread := a.opts.Publisher != nil && !a.loaded
		in.Health = make([]v1alpha1.GPUHealth, len(snap.Devices))
		for i := range snap.Devices {
			h := a.tracker.Evaluate(&snap.Devices[i])
			if unread && h.State == v1alpha1.GPUHealthy {
				h = v1alpha1.GPUHealth{State: v1alpha1.GPUUnknown, Reason: health.ReasonHealthNotRestored,
					Message: "the GPUInventory published before could not be read yet; it may hold a sticky verdict for this GPU"}
			}
			in.Health[i] = h
		}
	}
	status := inventory.Status(in)
	r := &Result{Snapshot: snap, State: publisher.State{Status: status, Labels: labels.ForNode(snap), Healthy: int(status.Summary.Healthy)}}
	if in.ScanError != nil {
		// A failed scan says nothing new about the GPUs: keep the labels and
		// gauges as they were rather than removing them, and before any scan
		// succeeded, leave the node's labels alone. Once the scans are
		// failing (the GPUs no longer count), the gauges go: their last
		// readings would pass for current ones.
		r.State.Labels, r.State.KeepLabels = nil, true
		if prev := a.Last(); prev != nil {
			r.State.Labels, r.State.KeepLabels = prev.State.Labels, prev.State.KeepLabels
		}
		if m := a.opts.Metrics; m != nil && in.UnhealthyAfter > 0 && a.failedScans >= in.UnhealthyAfter {
			m.GPUs.Delete(a.opts.NodeName)
		}
	} else {
		a.exportMetrics(r, in.Health)
	}
	a.last = &r.State.Status
	a.mu.Lock()
	a.snapshot = r
	a.mu.Unlock()
	if (in.ScanError == nil || in.ScansFailing()) && a.opts.OnScanned != nil {
		a.opts.OnScanned(r)
	}
	return r
}

func (a *Agent) exportMetrics(r *Result, h []v1alpha1.GPUHealth) {
	m := a.opts.Metrics
	if m == nil {
		return
	}
	var gpus []metrics.GPU
	driver := ""
	if s := r.Snapshot; s != nil {
		driver = s.DriverVersion
		gpus = make([]metrics.GPU, len(s.Devices))
		for i := range s.Devices {
			d := &s.Devices[i]
			xid, _ := a.tracker.LastXID(d.UUID)
			gpus[i] = metrics.GPU{Device: d, Healthy: h[i].State == v1alpha1.GPUHealthy, LastXID: xid}
		}
	}
	m.GPUs.Set(a.opts.NodeName, driver, gpus)
}
