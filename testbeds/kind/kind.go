// Package kind is gpulab's kind testbed: real kubelets, containerd and pod
// networking in Docker containers, from a node image and component images
// built on this machine (package nodeimage; no registry). Clusters are
// created, inspected and deleted through kind's Go API
// (sigs.k8s.io/kind/pkg/cluster), never a kind binary; on a failed
// creation the nodes' logs are exported (kind export logs) into the
// artifacts folder.
package kind

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindlog "sigs.k8s.io/kind/pkg/log"

	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/kind/dockerhost"
	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
	"github.com/gpulab/gpulab/testbeds/kind/nodeimage"
	"github.com/gpulab/gpulab/testbeds/testbed"
)

// ErrInvalidName is returned for a cluster name that is not a DNS-1123 label.
var ErrInvalidName = errors.New("invalid kind cluster name")

// DefaultWorkerProfile is the node profile the workers play.
const DefaultWorkerProfile = "dgx-h100"

// Options configures a kind testbed.
type Options struct {
	// Name of the kind cluster, a DNS-1123 label (it names a folder under
	// the cache). Defaults to "gpulab".
	Name string
	// Workers is the number of worker nodes. Defaults to 4; negative is
	// an error.
	Workers int
	// WorkerProfile labels the workers (gpulab.io/testbed-profile).
	// Defaults to DefaultWorkerProfile.
	WorkerProfile string
	// NodeImage is the node image. Defaults to the one nodeimage.Build
	// makes (built if missing).
	NodeImage string
	// CacheDir holds binaries, images' work folders, Docker state and the
	// kubeconfig. Defaults to binaries.DefaultCacheDir().
	CacheDir string
	// ArtifactsDir receives the nodes' logs when creation fails. Defaults
	// to <repo>/_artifacts/kind-<Name>.
	ArtifactsDir string
	// ReadyTimeout bounds the wait for nodes, CoreDNS and the pod network.
	// Defaults to 5 minutes.
	ReadyTimeout time.Duration
	// Log receives progress. Defaults to io.Discard.
	Log io.Writer
	// Reuse uses a cluster of this name that gpulab created earlier as it
	// is, instead of refusing to create one over it.
	Reuse bool
	// VolcanoVersion is the Volcano Install builds images of and installs,
	// one of binaries.VolcanoVersions. Defaults to $GPULAB_VOLCANO_VERSION,
	// else binaries.DefaultVolcanoVersion.
	VolcanoVersion string
	// GPUAllocation is how the agent hands the workers' mock GPUs to the
	// kubelet: GPUAllocationDevicePlugin (nvidia.com/gpu, the default) or
	// GPUAllocationDRA (DRA claims of DeviceClass gpu.gpulab.io).
	GPUAllocation string
}

// The agent's modes on kind, each an overlay of testbeds/kind/agent.
const (
	GPUAllocationDevicePlugin = "device-plugin"
	GPUAllocationDRA          = "dra"
)

// ErrClusterExists says a kind cluster of the name is already there.
// Create never deletes it: one gpulab did not create is someone else's.
var ErrClusterExists = errors.New("kind cluster exists")

// provider is what the testbed uses of kind's cluster.Provider.
type provider interface {
	List() ([]string, error)
	Create(name string, options ...cluster.CreateOption) error
	Delete(name, explicitKubeconfigPath string) error
	ListInternalNodes(name string) ([]nodes.Node, error)
	CollectLogs(name, dir string) error
}

// Cluster is one kind cluster.
type Cluster struct {
	opts       Options
	root       string
	kubeconfig string
	provider   provider
	// reused is set by Create when it took over an existing cluster of
	// gpulab's (Options.Reuse).
	reused bool
	// NodeImage is the node image the cluster runs (set by Create).
	NodeImage string
}

var _ testbed.Testbed = (*Cluster)(nil)

// New checks the options and resolves the paths; it starts nothing.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Name == "" {
		opts.Name = "gpulab"
	}
	if errs := validation.IsDNS1123Label(opts.Name); len(errs) > 0 {
		return nil, fmt.Errorf("%w %q: %s", ErrInvalidName, opts.Name, strings.Join(errs, "; "))
	}
	if opts.Workers < 0 {
		return nil, fmt.Errorf("kind: Workers must not be negative, got %d", opts.Workers)
	}
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	if opts.WorkerProfile == "" {
		opts.WorkerProfile = DefaultWorkerProfile
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 5 * time.Minute
	}
	if _, err := agentOverlay(opts.GPUAllocation); err != nil {
		return nil, err
	}
	var err error
	if opts.VolcanoVersion, err = binaries.ResolveVolcanoVersion(opts.VolcanoVersion); err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	if opts.CacheDir == "" {
		if opts.CacheDir, err = binaries.DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	if opts.ArtifactsDir == "" {
		opts.ArtifactsDir = filepath.Join(root, "_artifacts", "kind-"+opts.Name)
	}
	return &Cluster{
		opts: opts, root: root,
		kubeconfig: filepath.Join(opts.CacheDir, "kind", "clusters", opts.Name, "kubeconfig"),
		provider:   cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(logger{opts.Log})),
		NodeImage:  opts.NodeImage,
	}, nil
}

// Name is the kind cluster's name.
func (c *Cluster) Name() string { return c.opts.Name }

// VolcanoVersion is the Volcano that Install installs (Options.VolcanoVersion
// resolved), for a result's environment.
func (c *Cluster) VolcanoVersion() string { return c.opts.VolcanoVersion }

// Kubeconfig is the cluster's kubeconfig path.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// DockerStateDir is where the testbed keeps the dockerd it starts.
func DockerStateDir(cacheDir string) string { return filepath.Join(cacheDir, "kind", "docker") }

// Up creates the cluster (Create) and installs Volcano and gpulab on it
// (Install); if the install fails, the nodes' logs are exported and the
// cluster is deleted.
func (c *Cluster) Up(ctx context.Context) error {
	if err := c.Create(ctx); err != nil {
		return err
	}
	if err := c.Install(ctx); err != nil {
		return c.failed(ctx, err)
	}
	return nil
}

// Create makes sure Docker runs and the node image exists, creates the
// cluster and waits until every node is Ready, CoreDNS is available and
// the pod network runs on every node. On failure the nodes' logs go to
// the artifacts folder and the error says where.
func (c *Cluster) Create(ctx context.Context) error {
	if _, err := dockerhost.Ensure(ctx, dockerhost.Options{StateDir: DockerStateDir(c.opts.CacheDir), RepoRoot: c.root, Log: c.opts.Log}); err != nil {
		return err
	}
	if c.NodeImage == "" {
		res, err := nodeimage.Build(ctx, nodeimage.Options{CacheDir: c.opts.CacheDir, RepoRoot: c.root, Log: c.opts.Log})
		if err != nil {
			return err
		}
		c.NodeImage = res.Ref
	}
	if done, err := c.claimName(); err != nil || done {
		if err == nil {
			fmt.Fprintf(c.opts.Log, "reusing kind cluster %q, which gpulab created\n", c.opts.Name)
			err = c.WaitReady(ctx)
		}
		return err
	}
	start := time.Now()
	fmt.Fprintf(c.opts.Log, "creating kind cluster %q (1 control plane, %d workers) from %s...\n", c.opts.Name, c.opts.Workers, c.NodeImage)
	err := c.provider.Create(c.opts.Name,
		cluster.CreateWithV1Alpha4Config(c.Config()),
		cluster.CreateWithNodeImage(c.NodeImage),
		cluster.CreateWithKubeconfigPath(c.kubeconfig),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
		cluster.CreateWithRetain(true), // keep failed nodes until their logs are exported
	)
	if err == nil {
		err = c.WaitReady(ctx)
	}
	if err != nil {
		return c.failed(ctx, fmt.Errorf("creating kind cluster %q: %w", c.opts.Name, err))
	}
	fmt.Fprintf(c.opts.Log, "kind cluster %q ready in %s\n", c.opts.Name, time.Since(start).Round(time.Second))
	return nil
}

// ownerMarker is written beside the kubeconfig before gpulab creates a
// cluster: Down deletes only clusters that carry it.
func (c *Cluster) ownerMarker() string {
	return filepath.Join(filepath.Dir(c.kubeconfig), "created-by-gpulab")
}

func (c *Cluster) createdByGpulab() bool {
	_, err := os.Stat(c.ownerMarker())
	return err == nil
}

// claimName makes sure no cluster of the name exists and marks the name as
// gpulab's, or, with Options.Reuse and a cluster gpulab created, reports
// that one is there to use (true). A cluster of the name is never deleted.
func (c *Cluster) claimName() (bool, error) {
	existing, err := c.provider.List()
	if err != nil {
		return false, fmt.Errorf("listing kind clusters: %w", err)
	}
	if slices.Contains(existing, c.opts.Name) {
		switch {
		case !c.createdByGpulab():
			return false, fmt.Errorf("%w: %q was not created by gpulab, so it is left alone: choose another --name (or delete it yourself: kind delete cluster --name %s)",
				ErrClusterExists, c.opts.Name, c.opts.Name)
		case c.opts.Reuse:
			c.reused = true
			return true, nil
		default:
			return false, fmt.Errorf("%w: %q, created by gpulab earlier: use it with --reuse, or delete it with kind-down first", ErrClusterExists, c.opts.Name)
		}
	}
	if err := os.MkdirAll(filepath.Dir(c.kubeconfig), 0o755); err != nil {
		return false, err
	}
	return false, os.WriteFile(c.ownerMarker(), []byte(c.opts.Name+"\n"), 0o644)
}

// failed exports the nodes' logs and deletes the cluster.
func (c *Cluster) failed(ctx context.Context, err error) error {
	if logErr := c.CollectLogs(ctx, c.opts.ArtifactsDir); logErr != nil {
		err = errors.Join(err, logErr)
	} else {
		err = fmt.Errorf("%w (node logs: %s)", err, c.opts.ArtifactsDir)
	}
	return errors.Join(err, c.Down(context.WithoutCancel(ctx)))
}

// Config is the kind cluster config: one control plane and the workers,
// labelled with their profile; kubeadm told which etcd image the node
// image holds and, on a cgroup v1 host, to run the kubelet there anyway.
func (c *Cluster) Config() *v1alpha4.Cluster {
	cfg := &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Nodes:    []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}},
		KubeadmConfigPatches: []string{
			"kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: " + nodeimage.EtcdTag + "\n",
		},
	}
	if CgroupV1() {
		cfg.KubeadmConfigPatches = append(cfg.KubeadmConfigPatches, "kind: KubeletConfiguration\nfailCgroupV1: false\n")
	}
	for range c.opts.Workers {
		cfg.Nodes = append(cfg.Nodes, v1alpha4.Node{Role: v1alpha4.WorkerRole, Labels: map[string]string{
			"gpulab.io/testbed-profile": c.opts.WorkerProfile,
			"nvidia.com/gpu.present":    "true",
		}})
	}
	v1alpha4.SetDefaultsCluster(cfg)
	return cfg
}

// CgroupV1 says whether this host runs cgroup v1 (no unified hierarchy
// at /sys/fs/cgroup).
func CgroupV1() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err != nil
}

// WaitReady polls until every node is Ready, CoreDNS is available and the
// pod network's DaemonSet runs everywhere, or ReadyTimeout passes.
func (c *Cluster) WaitReady(ctx context.Context) error {
	client, err := c.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.ReadyTimeout)
	defer cancel()
	want := c.opts.Workers + 1
	var last error
	for {
		if last = ready(ctx, client, want); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w", c.opts.ReadyTimeout, last)
		case <-time.After(2 * time.Second):
		}
	}
}

func ready(ctx context.Context, client kubernetes.Interface, want int) error {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	readyNodes := 0
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				readyNodes++
			}
		}
	}
	if readyNodes != want || len(nodes.Items) != want {
		return fmt.Errorf("%d of %d nodes Ready", readyNodes, want)
	}
	dns, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if dns.Status.AvailableReplicas < 1 || dns.Status.AvailableReplicas != dns.Status.Replicas {
		return fmt.Errorf("CoreDNS: %d of %d replicas available", dns.Status.AvailableReplicas, dns.Status.Replicas)
	}
	net, err := client.AppsV1().DaemonSets("kube-system").Get(ctx, "gpulab-kindnet", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if int(net.Status.NumberReady) != want {
		return fmt.Errorf("pod network: ready on %d of %d nodes", net.Status.NumberReady, want)
	}
	return nil
}

// Client is a client of the cluster's API server.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the kind kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// LoadImages loads local Docker images into every node's containerd with
// kind's loader, as `kind load docker-image` does.
func (c *Cluster) LoadImages(ctx context.Context, refs ...string) error {
	nodes, err := c.provider.ListInternalNodes(c.opts.Name)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gpulab-kind-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	archive := filepath.Join(dir, "images.tar")
	if err := command.Run(ctx, command.Cmd{Name: "docker", Args: append([]string{"save", "-o", archive}, refs...)}); err != nil {
		return err
	}
	var errs []error
	for _, n := range nodes {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		if err := nodeutils.LoadImageArchive(n, f); err != nil {
			errs = append(errs, fmt.Errorf("loading images into %s: %w", n.String(), err))
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// CollectLogs exports every node's logs into dir (kind export logs).
func (c *Cluster) CollectLogs(_ context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := c.provider.CollectLogs(c.opts.Name, dir); err != nil {
		return fmt.Errorf("exporting the logs of kind cluster %q: %w", c.opts.Name, err)
	}
	return nil
}

// Down deletes the cluster and its kubeconfig; a missing cluster is no
// error, and one that gpulab did not create is refused.
func (c *Cluster) Down(_ context.Context) error {
	if !c.createdByGpulab() {
		existing, err := c.provider.List()
		if err != nil {
			return fmt.Errorf("listing kind clusters: %w", err)
		}
		if slices.Contains(existing, c.opts.Name) {
			return fmt.Errorf("%w: %q was not created by gpulab: not deleting it", ErrClusterExists, c.opts.Name)
		}
		return nil
	}
	if err := c.provider.Delete(c.opts.Name, c.kubeconfig); err != nil {
		return fmt.Errorf("deleting kind cluster %q: %w", c.opts.Name, err)
	}
	_ = os.RemoveAll(filepath.Dir(c.kubeconfig))
	return nil
}

// logger writes kind's progress to a writer.
type logger struct{ w io.Writer }

func (l logger) Warn(m string)                            { fmt.Fprintln(l.w, "kind:", m) }
func (l logger) Warnf(f string, a ...any)                 { fmt.Fprintf(l.w, "kind: "+f+"\n", a...) }
func (l logger) Error(m string)                           { fmt.Fprintln(l.w, "kind: error:", m) }
func (l logger) Errorf(f string, a ...any)                { fmt.Fprintf(l.w, "kind: error: "+f+"\n", a...) }
func (l logger) V(level kindlog.Level) kindlog.InfoLogger { return infoLogger{l.w, level <= 0} }

type infoLogger struct {
	w  io.Writer
	on bool
}

func (l infoLogger) Info(m string) {
	if l.on {
		fmt.Fprintln(l.w, "kind:", m)
	}
}

func (l infoLogger) Infof(f string, a ...any) {
	if l.on {
		fmt.Fprintf(l.w, "kind: "+f+"\n", a...)
	}
}

func (l infoLogger) Enabled() bool { return l.on }
