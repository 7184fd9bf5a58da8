package nodeimage

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/kind/images"
	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
)

// files are the node's own files: the entrypoint, systemd units, the
// containerd and crictl configs, sysctls and the pod network's manifest.
//
//go:embed all:files
var files embed.FS

// Options configures Build and EnsureBase.
type Options struct {
	// CacheDir holds the binaries (bin/) and the image build's work folder
	// (kind/build). Defaults to binaries.DefaultCacheDir().
	CacheDir string
	// RepoRoot is the gpulab repository the shim, pause and the pod
	// network are built from. Defaults to repo.Root().
	RepoRoot string
	// Mirror is the Debian mirror. Defaults to DefaultMirror.
	Mirror string
	// Log receives progress. Defaults to io.Discard.
	Log io.Writer

	// WorkDir is <CacheDir>/kind/build.
	WorkDir string
}

func (o Options) withDefaults() (Options, error) {
	var err error
	if o.CacheDir == "" {
		if o.CacheDir, err = binaries.DefaultCacheDir(); err != nil {
			return o, err
		}
	}
	if o.RepoRoot == "" {
		if o.RepoRoot, err = repo.Root(); err != nil {
			return o, err
		}
	}
	if o.Mirror == "" {
		o.Mirror = DefaultMirror
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.CacheDir, err = filepath.Abs(o.CacheDir); err != nil {
		return o, err
	}
	o.WorkDir = filepath.Join(o.CacheDir, "kind", "build")
	return o, os.MkdirAll(o.WorkDir, 0o755)
}

// Repository is the node image's repository; its tag is the Kubernetes
// version and a hash of everything in it.
const Repository = "gpulab-kind-node"

// Result is what Build made.
type Result struct {
	// Ref is the node image, gpulab-kind-node:<kubernetes version>-<hash>.
	Ref string
	// Base is the base image it starts from.
	Base string
	// Programs are the binaries in it.
	Programs Programs
	// Built is false when the image was already there.
	Built bool
}

// Build makes the node image unless one with the same content exists:
// the base image, the binaries (from the Go module proxy, cached), the
// component images, then a node container that imports them into its
// containerd, committed as the node image.
func Build(ctx context.Context, opts Options) (*Result, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	base, err := EnsureBase(ctx, opts)
	if err != nil {
		return nil, err
	}
	progs, err := buildPrograms(ctx, opts)
	if err != nil {
		return nil, err
	}
	components := ComponentImages(*progs, base)
	h := sha256.New()
	for _, r := range components {
		built, err := images.Build(ctx, r, images.Options{WorkDir: opts.WorkDir, Log: opts.Log})
		if err != nil {
			return nil, err
		}
		if built {
			fmt.Fprintf(opts.Log, "built image %s\n", r.Ref)
		}
		id, err := images.ImageID(ctx, r.Ref)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s=%s\n", r.Ref, id)
	}
	stage, err := stageRecipe(opts, *progs, base)
	if err != nil {
		return nil, err
	}
	stageHash, err := stage.Hash(ctx)
	if err != nil {
		return nil, err
	}
	_, _ = io.WriteString(h, stageHash) // a hash never fails to write
	res := &Result{Ref: Repository + ":" + binaries.KubernetesVersion + "-" + hex.EncodeToString(h.Sum(nil))[:12], Base: base, Programs: *progs}
	if images.Exists(ctx, res.Ref) {
		return res, nil
	}
	start := time.Now()
	fmt.Fprintf(opts.Log, "building node image %s...\n", res.Ref)
	if _, err := images.Build(ctx, stage, images.Options{WorkDir: opts.WorkDir, Log: opts.Log}); err != nil {
		return nil, err
	}
	refs := make([]string, 0, len(components))
	for _, r := range components {
		refs = append(refs, r.Ref)
	}
	if err := preload(ctx, opts, stage.Ref, res.Ref, refs); err != nil {
		return nil, err
	}
	res.Built = true
	fmt.Fprintf(opts.Log, "built node image %s in %s\n", res.Ref, time.Since(start).Round(time.Second))
	return res, nil
}

// stageRecipe is the node image before its containerd holds the component
// images: the base plus the node's files and programs.
func stageRecipe(opts Options, p Programs, base string) (images.Recipe, error) {
	dir := filepath.Join(opts.WorkDir, "node-files")
	if err := os.RemoveAll(dir); err != nil {
		return images.Recipe{}, err
	}
	r := images.Recipe{
		Ref: Repository + ":stage", Base: base, Files: nodeFiles(p),
		Env:        []string{"container=docker"},
		StopSignal: "SIGRTMIN+3", // systemd's signal to shut down
		Entrypoint: []string{"/usr/local/bin/entrypoint", "/sbin/init"},
	}
	extra := map[string]string{
		"kind/version": binaries.KubernetesVersion + "\n",
	}
	err := fs.WalkDir(files, "files", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(name, "files/")
		extra[rel] = strings.ReplaceAll(string(data), "KINDNET_IMAGE", KindnetRef())
		return nil
	})
	if err != nil {
		return r, err
	}
	for rel, content := range extra {
		mode := os.FileMode(0o644)
		if strings.HasPrefix(rel, "usr/local/bin/") || strings.HasPrefix(rel, "kind/bin/") {
			mode = 0o755
		}
		src := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
			return r, err
		}
		if err := os.WriteFile(src, []byte(content), mode); err != nil {
			return r, err
		}
		if err := os.Chmod(src, mode); err != nil { // WriteFile's mode is masked by the umask
			return r, err
		}
		r.Files[path.Join("/", rel)] = src
	}
	return r, nil
}

// preloadScript enables the node's services and imports the component
// images into containerd's k8s.io namespace without unpacking them (the
// node's overlay root cannot hold overlay snapshots; containerd unpacks
// them when a node starts), pinned so that the kubelet's image GC keeps
// them.
const preloadScript = `set -o errexit -o nounset -o pipefail
systemctl enable containerd.service kubelet.service gpulab-restore-proc-cgroups.service
mkdir -p /etc/kubernetes/manifests /var/lib/kubelet
containerd >/tmp/containerd.log 2>&1 &
pid=$!
for i in $(seq 1 120); do
  if [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then cat /tmp/containerd.log >&2; exit 1; fi
  sleep 0.5
done
ctr --namespace=k8s.io images import --no-unpack --all-platforms --digests --label=io.cri-containerd.pinned=pinned /kind/preload/images.tar
ctr --namespace=k8s.io images ls -q
kill "$pid"
wait "$pid" || true
rm -rf /tmp/containerd.log /run/containerd
`

// preload runs the stage image, imports the images into its containerd and
// commits the container as the node image.
func preload(ctx context.Context, opts Options, stage, ref string, refs []string) error {
	dir, err := os.MkdirTemp(opts.WorkDir, "preload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := images.Save(ctx, refs, filepath.Join(dir, "images.tar")); err != nil {
		return fmt.Errorf("saving the component images: %w", err)
	}
	name := "gpulab-kind-node-build-" + fmt.Sprint(os.Getpid())
	_ = command.Run(ctx, command.Cmd{Name: "docker", Args: []string{"rm", "-f", name}})
	if err := command.Run(ctx, command.Cmd{Name: "docker", Args: []string{"run", "-d", "--name", name, "--privileged",
		"--entrypoint", "sleep", "-v", dir + ":/kind/preload:ro", stage, "infinity"}}); err != nil {
		return err
	}
	defer func() {
		_ = command.Run(context.WithoutCancel(ctx), command.Cmd{Name: "docker", Args: []string{"rm", "-f", name}})
	}()
	out, err := command.Output(ctx, command.Cmd{Name: "docker", Args: []string{"exec", name, "bash", "-c", preloadScript}})
	if err != nil {
		return fmt.Errorf("importing images into the node's containerd: %w", err)
	}
	for _, r := range refs {
		if !strings.Contains(out, r) {
			return fmt.Errorf("the node's containerd lacks %s after the import; it holds:\n%s", r, out)
		}
	}
	return command.Run(ctx, command.Cmd{Name: "docker", Args: []string{"commit",
		"--change", `ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]`,
		"--change", `CMD []`, name, ref}})
}

// buildPrograms builds the third-party binaries (cached by version) and
// the testbed's own: the runtime shim, pause and the pod network.
func buildPrograms(ctx context.Context, opts Options) (*Programs, error) {
	bopts := binaries.Options{CacheDir: opts.CacheDir, Log: opts.Log}
	set, err := binaries.Ensure(ctx, bopts)
	if err != nil {
		return nil, err
	}
	kind, err := binaries.EnsureKind(ctx, bopts)
	if err != nil {
		return nil, err
	}
	p := &Programs{Set: set, Kind: kind}
	out := filepath.Join(opts.WorkDir, "bin")
	// The shim runs on the host and pause in a scratch image: both static.
	// The pod network's image has the Debian base, so it may link glibc.
	for _, b := range []struct {
		dst    *string
		pkg    string
		static bool
	}{
		{&p.Shim, "./testbeds/kind/runtimeshim/cmd/gpulab-runc", true},
		{&p.Pause, "./testbeds/kind/images/pause", true},
		{&p.Kindnet, "./testbeds/kind/podnetwork/cmd/gpulab-kindnet", false},
	} {
		*b.dst = filepath.Join(out, path.Base(b.pkg))
		if err := command.Run(ctx, command.GoBuild{Pkg: b.pkg, Out: *b.dst, Dir: opts.RepoRoot, Static: b.static}.Cmd()); err != nil {
			return nil, fmt.Errorf("building %s: %w", b.pkg, err)
		}
	}
	return p, nil
}

// ErrNotBuilt is returned by Lookup when no node image is built.
var ErrNotBuilt = errors.New("no kind node image is built: run `gpulab-testbed kind-image`")
