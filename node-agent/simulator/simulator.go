package simulator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/node-agent/dra"
	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/metrics"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
	"github.com/gpulab/gpulab/node-agent/internal/nvml/mock"
	"github.com/gpulab/gpulab/node-agent/internal/publisher"
)

// ProfileLabel names the mock profile of a fake GPU node; the local testbed
// sets it.
const ProfileLabel = "gpulab.io/testbed-profile"

// XIDAnnotation asks the simulator to inject XIDs into a node's mock GPUs:
// "<gpu index>:<xid>[,...]".
const XIDAnnotation = "gpulab.io/simulate-xid"

// Options configures Run.
type Options struct {
	// Config reaches the API server. Required.
	Config *rest.Config
	// Interval is each node's rescan interval. Defaults to 30s.
	Interval time.Duration
	// IgnoredXIDs leave a GPU healthy. Nil means the device plugin's default
	// set (13, 31, 43, 45, 68, 109).
	IgnoredXIDs []uint64
	// LabelNodes applies GFD-compatible labels to each node. Defaults to
	// false.
	LabelNodes bool
	// AdvertiseCapacity sets each node's nvidia.com/gpu capacity to its
	// healthy GPU count. Defaults to false.
	AdvertiseCapacity bool
	// FieldManager owns what is applied. Defaults to gpulab-agent.
	FieldManager string
	// LeaseNamespace holds the nodes' heartbeat Leases. Defaults to
	// v1alpha1.DefaultHeartbeatLeaseNamespace.
	LeaseNamespace string
	// Registerer receives the agents' metrics; nil exports none.
	Registerer prometheus.Registerer
	// MetricsFormat selects the per-GPU series (gpulab, dcgm or both).
	// Defaults to metrics.FormatBoth.
	MetricsFormat metrics.Format
	// Log defaults to logr.Discard().
	Log logr.Logger
	// Ready, when set, is called once the node list has been read and an
	// agent started for every fake GPU node in it.
	Ready func(nodes int)
	// DRADriver, when set, also publishes each node's healthy GPUs as DRA
	// devices of this driver (dra.DefaultDriverName), a pool per node.
	DRADriver string
}

// Run simulates the agent of every fake GPU node until ctx is done.
func Run(ctx context.Context, opts Options) error {
	s, err := newSimulator(opts)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

type simulator struct {
	opts    Options
	log     logr.Logger
	client  client.WithWatch
	pub     *publisher.Publisher
	metrics *metrics.Metrics
	// kube publishes ResourceSlices; nil without Options.DRADriver.
	kube kubernetes.Interface

	mu    sync.Mutex
	nodes map[string]*simNode
	wg    sync.WaitGroup
}

type simNode struct {
	profile  string
	backend  *mock.Backend
	agent    *agent.Agent
	cancel   context.CancelFunc
	injected map[string]bool
}

func newSimulator(opts Options) (*simulator, error) {
	if opts.Config == nil {
		return nil, errors.New("simulator: Config is required")
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	cfg := rest.CopyConfig(opts.Config)
	if cfg.QPS == 0 {
		// Hundreds of nodes publish at start-up; client-go's default of 5
		// would take minutes.
		cfg.QPS, cfg.Burst = 50, 100
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: publisher.NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("simulator: creating client: %w", err)
	}
	s := &simulator{opts: opts, log: opts.Log, client: c, nodes: map[string]*simNode{}}
	if opts.DRADriver != "" {
		if s.kube, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("simulator: creating client: %w", err)
		}
	}
	if opts.Registerer != nil {
		s.metrics = metrics.New(opts.Registerer, metrics.Options{Format: opts.MetricsFormat})
	}
	s.pub = publisher.New(c, publisher.Options{
		FieldManager: opts.FieldManager, LeaseNamespace: opts.LeaseNamespace, LabelNode: opts.LabelNodes,
		AdvertiseCapacity: opts.AdvertiseCapacity, Metrics: s.metrics,
	})
	return s, nil
}

func (s *simulator) run(ctx context.Context) error {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = ProfileLabel
			var l corev1.NodeList
			err := s.client.List(ctx, &l, &client.ListOptions{Raw: &o})
			return &l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = ProfileLabel
			return s.client.Watch(ctx, &corev1.NodeList{}, &client.ListOptions{Raw: &o})
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.upsert(ctx, obj) },
		UpdateFunc: func(_, obj any) { s.upsert(ctx, obj) },
		DeleteFunc: s.remove,
	}); err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		s.stopAll()
		return nil // cancelled before the first list
	}
	s.mu.Lock()
	n := len(s.nodes)
	s.mu.Unlock()
	s.log.Info("simulating fake GPU nodes", "nodes", n, "selector", ProfileLabel)
	if s.opts.Ready != nil {
		s.opts.Ready(n)
	}
	<-ctx.Done()
	s.stopAll()
	return nil
}

func (s *simulator) upsert(ctx context.Context, obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	profile := node.Labels[ProfileLabel]
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.nodes[node.Name]
	if sn != nil && sn.profile != profile {
		s.stopLocked(node.Name)
		sn = nil
	}
	if sn == nil {
		var err error
		if sn, err = s.start(ctx, node.Name, profile); err != nil {
			s.log.Error(err, "cannot simulate node", "node", node.Name)
			return
		}
		s.nodes[node.Name] = sn
	}
	s.injectFromAnnotation(node, sn)
}

func (s *simulator) start(ctx context.Context, name, profile string) (*simNode, error) {
	b, err := mock.New(profile, name, nvml.Options{EventWaitTimeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	nctx, cancel := context.WithCancel(ctx)
	var slices *dra.Publisher
	if s.kube != nil {
		slices = dra.Start(nctx, s.kube, s.opts.DRADriver, name, s.log)
	}
	a, err := agent.New(b, agent.Options{
		NodeName: name, Interval: s.opts.Interval, IgnoredXIDs: s.opts.IgnoredXIDs,
		Publisher: s.pub, Metrics: s.metrics, Log: s.log,
		OnScanned: func(r *agent.Result) {
			if slices != nil {
				slices.Update(&r.State.Status)
			}
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	s.wg.Go(func() {
		if err := a.Run(nctx); err != nil {
			s.log.Error(err, "agent stopped", "node", name)
		}
	})
	s.log.V(1).Info("simulating node", "node", name, "profile", profile)
	return &simNode{profile: profile, backend: b, agent: a, cancel: cancel, injected: map[string]bool{}}, nil
}

// injectFromAnnotation delivers each XID the node's annotation asks for once.
func (s *simulator) injectFromAnnotation(node *corev1.Node, sn *simNode) {
	spec := node.Annotations[XIDAnnotation]
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" || sn.injected[item] {
			continue
		}
		sn.injected[item] = true
		gpu, xid, err := parseXID(item)
		if err == nil {
			err = sn.backend.InjectXID(gpu, xid)
		}
		if err != nil {
			s.log.Error(err, "ignoring annotation item", "node", node.Name, "annotation", XIDAnnotation, "item", item)
			continue
		}
		s.log.Info("injected XID", "node", node.Name, "gpu", gpu, "xid", xid)
	}
}

func parseXID(item string) (int, uint64, error) {
	g, x, ok := strings.Cut(item, ":")
	gpu, err1 := strconv.Atoi(g)
	xid, err2 := strconv.ParseUint(x, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("want <gpu index>:<xid>, got %q", item)
	}
	return gpu, xid, nil
}

func (s *simulator) remove(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(node.Name)
}

func (s *simulator) stopLocked(name string) {
	sn, ok := s.nodes[name]
	if !ok {
		return
	}
	sn.cancel()
	delete(s.nodes, name)
	s.pub.Forget(name)
	if s.metrics != nil {
		s.metrics.GPUs.Delete(name)
	}
}

func (s *simulator) stopAll() {
	s.mu.Lock()
	for name := range s.nodes {
		s.stopLocked(name)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
