// Package kind brings up gpulab on a kind cluster (Docker hosts): Volcano
// from its release manifest, the gpulab CRDs and operator, and the node
// agent with a mock NVML per worker that advertises nvidia.com/gpu capacity
// (testbed mode). It needs Docker and network access for Volcano's images,
// so gpulab's own CI does not run it; the manifests it applies are tested.
package kind

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpulab/gpulab/testbeds/local/binaries"
)

// Version of kind the profile installs (`go install sigs.k8s.io/kind@...`).
const Version = "v0.33.0"

// Images are the locally built images loaded into the kind nodes.
var Images = map[string]string{
	"gpulab-operator:dev": "operator/Dockerfile",
	"gpulab-agent:dev":    "node-agent/Dockerfile",
}

// ErrInvalidName is returned for a cluster name that is not a DNS-1123 label.
var ErrInvalidName = errors.New("invalid kind cluster name")

// Options configures a kind testbed.
type Options struct {
	// Name of the kind cluster, a DNS-1123 label (it names a folder under
	// the cache). Defaults to "gpulab".
	Name string
	// Log receives the commands' output. Defaults to io.Discard.
	Log io.Writer
}

// Cluster is a kind cluster with gpulab installed.
type Cluster struct {
	opts       Options
	root       string
	kind       string
	kubectl    string
	kubeconfig string
}

// New resolves the repository, kind and kubectl; it starts nothing.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Name == "" {
		opts.Name = "gpulab"
	}
	if errs := validation.IsDNS1123Label(opts.Name); len(errs) > 0 {
		return nil, fmt.Errorf("%w %q: %s", ErrInvalidName, opts.Name, strings.Join(errs, "; "))
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	root, err := binaries.ModuleRoot()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, fmt.Errorf("the kind testbed needs Docker: %w", err)
	}
	cache, err := binaries.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, root: root, kind: filepath.Join(cache, "bin", "kind-"+Version, "kind"),
		kubeconfig: filepath.Join(cache, "kind", opts.Name, "kubeconfig")}
	bins, err := binaries.Ensure(ctx, binaries.Options{Log: opts.Log})
	if err != nil {
		return nil, err
	}
	c.kubectl = bins.Kubectl
	if _, err := os.Stat(c.kind); err != nil {
		if err := c.run(ctx, "go", "install", "sigs.k8s.io/kind@"+Version); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Kubeconfig is the cluster's kubeconfig path.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// Up creates the cluster, loads the images and installs Volcano and gpulab.
func (c *Cluster) Up(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(c.kubeconfig), 0o755); err != nil {
		return err
	}
	for image, dockerfile := range Images {
		if err := c.run(ctx, "docker", "build", "-f", filepath.Join(c.root, dockerfile), "-t", image, c.root); err != nil {
			return err
		}
	}
	if err := c.run(ctx, c.kind, "create", "cluster", "--name", c.opts.Name, "--kubeconfig", c.kubeconfig,
		"--config", filepath.Join(c.root, "testbeds", "kind", "kind-config.yaml"), "--wait", "3m"); err != nil {
		return err
	}
	for image := range Images {
		if err := c.run(ctx, c.kind, "load", "docker-image", image, "--name", c.opts.Name); err != nil {
			return err
		}
	}
	volcano, err := binaries.Lookup(ctx, binaries.Options{})
	if err != nil {
		return err
	}
	steps := [][]string{
		{"apply", "--server-side", "-f", filepath.Join(volcano.VolcanoModuleDir, "installer", "volcano-development.yaml")},
		{"-n", "volcano-system", "wait", "--for=condition=Available", "deployment", "--all", "--timeout=5m"},
		{"apply", "--server-side", "-k", filepath.Join(c.root, "testbeds", "kind", "operator")},
		{"apply", "--server-side", "-k", filepath.Join(c.root, "testbeds", "kind", "agent")},
		{"-n", "gpulab-system", "wait", "--for=condition=Available", "deployment/gpulab-operator", "--timeout=3m"},
		{"-n", "gpulab-system", "rollout", "status", "daemonset/gpulab-agent", "--timeout=3m"},
	}
	for _, args := range steps {
		if err := c.run(ctx, c.kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...); err != nil {
			return err
		}
	}
	return nil
}

// Down deletes the cluster.
func (c *Cluster) Down(ctx context.Context) error {
	return c.run(ctx, c.kind, "delete", "cluster", "--name", c.opts.Name, "--kubeconfig", c.kubeconfig)
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	fmt.Fprintf(c.opts.Log, "$ %s %s\n", filepath.Base(name), strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(c.kind))
	cmd.Stdout, cmd.Stderr = c.opts.Log, c.opts.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", filepath.Base(name), args[0], err)
	}
	return nil
}
