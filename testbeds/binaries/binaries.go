package binaries

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpulab/gpulab/testbeds/internal/filelock"
)

// Versions of the third-party components. They move together: Volcano's and
// KubeRay's CRDs and kwok's stages are read from the same module versions
// that are built.
const (
	EtcdVersion       = "v3.6.16"
	KubernetesVersion = "v1.37.2"
	KwokVersion       = "v0.8.0"
	// DefaultVolcanoVersion and DefaultKubeRayVersion are built and run
	// unless Options (or $GPULAB_VOLCANO_VERSION, $GPULAB_KUBERAY_VERSION)
	// choose another of VolcanoVersions or KubeRayVersions.
	DefaultVolcanoVersion = "v1.14.1"
	DefaultKubeRayVersion = "v1.6.2"
	// DefaultDRAVolcanoVersion is the Volcano the conformance suite's
	// local profile runs when the gangs claim their GPUs through DRA and no
	// version is chosen: DefaultVolcanoVersion rebuilt on the Kubernetes
	// libraries that fix its DRA allocator (volcanoRelease.kubernetes).
	DefaultDRAVolcanoVersion = "v1.14.1+k8s.1.34.4"
	// VolcanoVersion and KubeRayVersion are the defaults under their
	// earlier names. What a testbed runs is its Set's (or
	// local.Testbed.Versions).
	VolcanoVersion = DefaultVolcanoVersion
	KubeRayVersion = DefaultKubeRayVersion
)

// CgoCFlags are the C flags of every cgo build of this repository (the
// Makefile exports the same): go-nvml's headers use deprecated declarations.
// They are part of every compiled package's cache key, so the testbeds'
// builds of the agent and the suite share `make test`'s compiled packages
// only while the values agree.
const CgoCFlags = "-O2 -g -Wno-deprecated-declarations"

// Options configures where binaries are cached and how progress is reported.
type Options struct {
	// CacheDir holds bin/, src/ and logs/. Defaults to DefaultCacheDir().
	CacheDir string
	// Log receives one line of progress per component. Defaults to io.Discard.
	Log io.Writer
	// GoBinary is the go command. Defaults to "go" on PATH.
	GoBinary string
	// VolcanoVersion is the Volcano to build and look up, one of
	// VolcanoVersions. Defaults to $GPULAB_VOLCANO_VERSION, else
	// DefaultVolcanoVersion.
	VolcanoVersion string
	// KubeRayVersion is KubeRay's operator to build and look up, one of
	// KubeRayVersions. Defaults to $GPULAB_KUBERAY_VERSION, else
	// DefaultKubeRayVersion.
	KubeRayVersion string
}

func (o Options) withDefaults() (Options, error) {
	if o.CacheDir == "" {
		dir, err := DefaultCacheDir()
		if err != nil {
			return o, err
		}
		o.CacheDir = dir
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.GoBinary == "" {
		o.GoBinary = "go"
	}
	var err error
	if o.VolcanoVersion, err = ResolveVolcanoVersion(o.VolcanoVersion); err != nil {
		return o, err
	}
	if o.KubeRayVersion, err = ResolveKubeRayVersion(o.KubeRayVersion); err != nil {
		return o, err
	}
	abs, err := filepath.Abs(o.CacheDir)
	if err != nil {
		return o, fmt.Errorf("resolving cache dir: %w", err)
	}
	o.CacheDir = abs
	return o, nil
}

// DefaultCacheDir is $GPULAB_CACHE, or gpulab in the user's cache folder
// (${XDG_CACHE_HOME:-$HOME/.cache}/gpulab): outside any checkout, so a fresh
// clone reuses what an earlier one built. Entries are keyed by version and
// built under a file lock, so clones can share it at once.
func DefaultCacheDir() (string, error) {
	if dir := os.Getenv("GPULAB_CACHE"); dir != "" {
		return dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache folder (%w): set GPULAB_CACHE to choose a cache directory", err)
	}
	return filepath.Join(base, "gpulab"), nil
}

// Set is the absolute paths of every testbed binary, plus the module
// directories the testbed reads manifests from.
type Set struct {
	Etcd                     string
	KubeAPIServer            string
	KubeControllerManager    string
	KubeScheduler            string
	Kubectl                  string
	Kwok                     string
	Kwokctl                  string
	VolcanoScheduler         string
	VolcanoControllerManager string
	// KubeRayOperator is KubeRay's ray-operator, which a testbed runs only
	// when asked to (local.Options.KubeRay).
	KubeRayOperator string

	// VolcanoVersion and KubeRayVersion are the versions the Volcano and
	// KubeRay paths are of.
	VolcanoVersion string
	KubeRayVersion string

	// VolcanoModuleDir is volcano.sh/volcano's source (its CRDs live there).
	VolcanoModuleDir string
	// KubeRayModuleDir is KubeRay's ray-operator module source; its CRDs
	// are in config/crd/bases.
	KubeRayModuleDir string
	// KwokModuleDir is sigs.k8s.io/kwok's source (its Stage library lives there).
	KwokModuleDir string
}

// component is one third-party build: a name, a version, the binaries it
// produces and how to build them into a folder.
type component struct {
	name     string
	version  string
	binaries []string
	build    func(ctx context.Context, b *builder, out string) error
}

func (c component) dir(cache string) string {
	return filepath.Join(cache, "bin", c.name+"-"+c.version)
}

// components make up every testbed, Volcano at the chosen version.
// KubeRay's operator runs only when a testbed asks for it and the
// Prometheus tools only for the dashboards' checks, so each is built only
// by what needs it (EnsureKubeRay, EnsureMonitoring): `make conformance`
// never waits for them.
func (b *builder) components() []component {
	return []component{etcd, kubernetes, kwok, b.volcano()}
}

func (b *builder) volcano() component { return volcanoComponent(b.opts.VolcanoVersion) }
func (b *builder) kuberay() component { return kuberayComponent(b.opts.KubeRayVersion) }

var monitoringComponents = []component{prometheus, pushgateway}

// Ensure builds whatever is missing from the cache and returns the full Set.
// Its KubeRayOperator exists only once EnsureKubeRay has built it.
func Ensure(ctx context.Context, opts Options) (*Set, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts}
	if err := b.ensureAll(ctx, b.components()); err != nil {
		return nil, err
	}
	return b.set(ctx)
}

// EnsureKubeRay builds KubeRay's operator if it is missing and returns its
// path.
func EnsureKubeRay(ctx context.Context, opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	b := &builder{opts: opts}
	if err := b.ensureAll(ctx, []component{b.kuberay()}); err != nil {
		return "", err
	}
	return b.path(b.kuberay(), "ray-operator"), nil
}

// ensureAll builds the missing components under the cache's build lock:
// two processes building one component would share (and delete) each
// other's .partial folder.
func (b *builder) ensureAll(ctx context.Context, cs []component) error {
	missing := false
	for _, c := range cs {
		if b.built(c) {
			b.logCached(c)
			continue
		}
		missing = true
	}
	if !missing {
		return nil
	}
	lock, err := filelock.Acquire(ctx, filepath.Join(b.opts.CacheDir, "bin", ".build.lock"),
		fmt.Sprintf("pid %d building", os.Getpid()), func(heldBy string) {
			fmt.Fprintf(b.opts.Log, "waiting for another build in %s (%s)\n", b.opts.CacheDir, heldBy)
		})
	if err != nil {
		return err
	}
	defer lock.Release()
	for _, c := range cs {
		if err := b.ensure(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the Set if every binary is already built, without building.
func Lookup(ctx context.Context, opts Options) (*Set, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts}
	for _, c := range b.components() {
		if !b.built(c) {
			return nil, notBuilt(c, opts.CacheDir)
		}
	}
	return b.set(ctx)
}

func notBuilt(c component, cacheDir string) error {
	return fmt.Errorf("%s %s is not built in %s: run `make testbed-binaries` (or `go run ./testbeds/cmd/gpulab-testbed build`; "+
		"VOLCANO_VERSION and KUBERAY_VERSION, or --volcano-version and --kuberay-version, choose the versions)", c.name, c.version, cacheDir)
}

// EnvtestAssets returns a folder holding only etcd and kube-apiserver, the
// layout controller-runtime's envtest expects in KUBEBUILDER_ASSETS.
func (s *Set) EnvtestAssets(cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, "envtest", KubernetesVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for name, target := range map[string]string{"etcd": s.Etcd, "kube-apiserver": s.KubeAPIServer} {
		link := filepath.Join(dir, name)
		if current, err := os.Readlink(link); err == nil && current == target {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return "", fmt.Errorf("linking %s into envtest assets: %w", name, err)
		}
	}
	return dir, nil
}

type builder struct {
	opts Options
}

func (b *builder) built(c component) bool {
	for _, bin := range c.binaries {
		if _, err := os.Stat(filepath.Join(c.dir(b.opts.CacheDir), bin)); err != nil {
			return false
		}
	}
	return true
}

// logCached says a component was found in the cache, in the form .ci/run's
// timing table reads ("cached NAME VERSION"; a build says "built NAME VERSION
// in D").
func (b *builder) logCached(c component) {
	fmt.Fprintf(b.opts.Log, "cached %s %s in %s\n", c.name, c.version, c.dir(b.opts.CacheDir))
}

func (b *builder) ensure(ctx context.Context, c component) error {
	if b.built(c) {
		// Built by the process this one waited for on the lock.
		b.logCached(c)
		return nil
	}
	final := c.dir(b.opts.CacheDir)
	tmp := final + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(b.opts.Log, "building %s %s (%s) from the Go module proxy...\n", c.name, c.version, strings.Join(c.binaries, ", "))
	start := time.Now()
	if err := c.build(ctx, b, tmp); err != nil {
		return fmt.Errorf("building %s %s: %w", c.name, c.version, err)
	}
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	fmt.Fprintf(b.opts.Log, "built %s %s in %s\n", c.name, c.version, time.Since(start).Round(time.Second))
	return nil
}

func (b *builder) path(c component, bin string) string {
	return filepath.Join(c.dir(b.opts.CacheDir), bin)
}

func (b *builder) set(ctx context.Context) (*Set, error) {
	path := b.path
	volcano, kuberay := b.volcano(), b.kuberay()
	volcanoDir, err := b.moduleDir(ctx, "volcano.sh/volcano", VolcanoModuleVersion(volcano.version))
	if err != nil {
		return nil, err
	}
	kwokDir, err := b.moduleDir(ctx, "sigs.k8s.io/kwok", KwokVersion)
	if err != nil {
		return nil, err
	}
	kuberayDir, err := b.moduleDir(ctx, kuberayModule, kuberay.version)
	if err != nil {
		return nil, err
	}
	return &Set{
		Etcd:                     path(etcd, "etcd"),
		KubeAPIServer:            path(kubernetes, "kube-apiserver"),
		KubeControllerManager:    path(kubernetes, "kube-controller-manager"),
		KubeScheduler:            path(kubernetes, "kube-scheduler"),
		Kubectl:                  path(kubernetes, "kubectl"),
		Kwok:                     path(kwok, "kwok"),
		Kwokctl:                  path(kwok, "kwokctl"),
		VolcanoScheduler:         path(volcano, "vc-scheduler"),
		VolcanoControllerManager: path(volcano, "vc-controller-manager"),
		KubeRayOperator:          path(kuberay, "ray-operator"),
		VolcanoVersion:           volcano.version,
		KubeRayVersion:           kuberay.version,
		VolcanoModuleDir:         volcanoDir,
		KubeRayModuleDir:         kuberayDir,
		KwokModuleDir:            kwokDir,
	}, nil
}

// srcDir is a throwaway module folder for builds that need their own go.mod.
func (b *builder) srcDir(name, version string) (string, error) {
	dir := filepath.Join(b.opts.CacheDir, "src", name+"-"+version)
	return dir, os.MkdirAll(dir, 0o755)
}

// goCmd runs the go command in dir, with output to a per-component log whose
// tail is returned in the error, so a failed build says why.
func (b *builder) goCmd(ctx context.Context, dir, logName string, env []string, args ...string) error {
	logDir := filepath.Join(b.opts.CacheDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(logDir, "build-"+logName+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "$ go %s\n", strings.Join(args, " "))

	cmd := exec.CommandContext(ctx, b.opts.GoBinary, args...)
	cmd.Dir = dir
	// Builds must not see the gpulab workspace or inherited flags, and
	// throwaway modules must be allowed to write their go.sum.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	cmd.Env = append(cmd.Env, env...)
	var tail tailBuffer
	cmd.Stdout = io.MultiWriter(logFile, &tail)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s\n(full log: %s)", args[0], err, tail.String(), logPath)
	}
	return nil
}

// moduleDir downloads a module and returns its source folder in the module cache.
func (b *builder) moduleDir(ctx context.Context, path, version string) (string, error) {
	info, err := b.download(ctx, path, version)
	if err != nil {
		return "", err
	}
	return info.Dir, nil
}

type moduleInfo struct {
	Dir   string
	GoMod string
	Error string
}

// download fetches a module version; env is added to the go command's
// environment (a module that asks for a newer Go needs its GOTOOLCHAIN).
func (b *builder) download(ctx context.Context, path, version string, env ...string) (*moduleInfo, error) {
	cmd := exec.CommandContext(ctx, b.opts.GoBinary, "mod", "download", "-json", path+"@"+version)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	var info moduleInfo
	if jsonErr := json.Unmarshal(out, &info); jsonErr != nil && err == nil {
		err = jsonErr
	}
	if info.Error != "" {
		return nil, fmt.Errorf("downloading %s@%s: %s", path, version, info.Error)
	}
	if err != nil {
		return nil, fmt.Errorf("downloading %s@%s: %w", path, version, err)
	}
	return &info, nil
}

// ldflagsX renders -X flags for the given variables of a package.
func ldflagsX(pkg string, vars map[string]string) []string {
	flags := make([]string, 0, len(vars))
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		flags = append(flags, fmt.Sprintf("-X %s.%s=%s", pkg, k, vars[k]))
	}
	return flags
}

// tailBuffer keeps the last few KiB written to it.
type tailBuffer struct{ buf []byte }

const tailSize = 4 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = t.buf[len(t.buf)-tailSize:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.buf)) }
