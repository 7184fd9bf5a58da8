package binaries

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// volcanoRelease is how one Volcano version builds.
type volcanoRelease struct {
	// apis, when set, is the volcano.sh/apis version the build replaces it
	// with. From v1.13 Volcano's go.mod requires volcano.sh/apis v0.0.0 and
	// replaces it with ./staging/src/volcano.sh/apis, a folder its module
	// zip leaves out; the apis module is released alongside, under its own
	// tags.
	apis string
}

// volcanoReleases are the Volcano versions the testbed builds. Each one's
// CRDs, scheduler configuration and controller flags are in the local
// testbed (volcano.go there), read from the same module version.
var volcanoReleases = map[string]volcanoRelease{
	"v1.10.0": {},
	"v1.14.1": {apis: "v1.14.0"},
	// A rebuild, <release>+k8s.<major>.<minor>.<patch> (semver build
	// metadata): the release's source and entry, on that Kubernetes
	// release's libraries (volcanoKubernetes). v1.14.1 pins k8s.io/kubernetes
	// v1.34.1, whose DRA allocator can hand one device to two claims
	// (docs/benchmarks/2026-12-03-dra.md); v1.34.4 fixes it, and no later
	// Volcano release is served to build instead.
	DefaultDRAVolcanoVersion: {},
	// v1.15.1 is one line away: {apis: "v1.15.x"} once the module proxy
	// serves that volcano.sh/apis (see volcanoUnbuildable).
}

// volcanoUnbuildable says why a version that was tried does not build.
var volcanoUnbuildable = map[string]string{
	"v1.15.1": "it needs volcano.sh/apis v1.15.x, which the Go module proxy does not serve, and with v1.14.0 " +
		"the scheduler fails to compile (undefined: schedulingv1beta1.QueueAllocationGateKey)",
}

// volcanoComponent builds Volcano's scheduler and controller manager in a
// throwaway module. Volcano pins its Kubernetes dependencies with a replace
// block, which a dependent module must repeat; the throwaway module copies
// it verbatim but for the replaces the release overrides.
func volcanoComponent(version string) component {
	module := VolcanoModuleVersion(version)
	release := volcanoReleases[module]
	return component{
		name:     "volcano",
		version:  version,
		binaries: []string{"vc-scheduler", "vc-controller-manager"},
		build: func(ctx context.Context, b *builder, out string) error {
			src, err := b.srcDir("volcano", version)
			if err != nil {
				return err
			}
			file, upstream, err := b.goModOf(ctx, "volcano.sh/volcano", module)
			if err != nil {
				return err
			}
			kubernetes, err := volcanoKubernetes(version)
			if err != nil {
				return err
			}
			overrides, err := kubernetesLibraries(file, upstream, kubernetes)
			if err != nil {
				return err
			}
			if release.apis != "" {
				overrides["volcano.sh/apis"] = release.apis
			}
			goMod, err := dependentGoModFrom("volcano", "volcano.sh/volcano", module, file, upstream, overrides)
			if err != nil {
				return err
			}
			tools := "//go:build tools\n\npackage tools\n\nimport (\n\t_ \"volcano.sh/volcano/cmd/controller-manager\"\n\t_ \"volcano.sh/volcano/cmd/scheduler\"\n)\n"
			if err := writeFiles(src, map[string]string{"go.mod": goMod, "tools.go": tools}); err != nil {
				return err
			}
			logName := "volcano-" + version
			if err := b.goCmd(ctx, src, logName, nil, "mod", "tidy"); err != nil {
				return err
			}
			// `vc-scheduler --version` and the first log line say which
			// release runs.
			ldflags := "-s -w -X volcano.sh/volcano/pkg/version.Version=" + version
			for _, bin := range []struct{ name, pkg string }{
				{"vc-scheduler", "volcano.sh/volcano/cmd/scheduler"},
				{"vc-controller-manager", "volcano.sh/volcano/cmd/controller-manager"},
			} {
				if err := b.goCmd(ctx, src, logName, nil, "build", "-trimpath", "-ldflags="+ldflags, "-o", filepath.Join(out, bin.name), bin.pkg); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// dependentGoMod is the go.mod of a throwaway module named after name that
// requires module at version and repeats the replace directives of that
// module's own go.mod: a replace applies only in the main module, so a
// dependent that leaves them out would build against other versions.
// overrides (module path → version) replace those paths with that version
// instead of what upstream says. A replace by a folder inside the module
// cannot be repeated (the dependent has no such folder): it is an error
// unless overridden.
func dependentGoMod(ctx context.Context, b *builder, name, module, version string, overrides map[string]string) (string, error) {
	file, data, err := b.goModOf(ctx, module, version)
	if err != nil {
		return "", err
	}
	return dependentGoModFrom(name, module, version, file, data, overrides)
}

// goModOf returns the path and content of a module version's go.mod; env
// is download's.
func (b *builder) goModOf(ctx context.Context, module, version string, env ...string) (string, []byte, error) {
	info, err := b.download(ctx, module, version, env...)
	if err != nil {
		return "", nil, err
	}
	data, err := os.ReadFile(info.GoMod)
	return info.GoMod, data, err
}

// VolcanoModuleVersion is the volcano.sh/volcano version a testbed
// version builds from: the version without its build metadata
// ("v1.14.1+k8s.1.34.4" builds v1.14.1).
func VolcanoModuleVersion(version string) string {
	module, _, _ := strings.Cut(version, "+")
	return module
}

// volcanoKubernetes is the Kubernetes release whose libraries a rebuild's
// name asks for ("v1.14.1+k8s.1.34.4" asks for v1.34.4), or "" for a
// release built as it is.
func volcanoKubernetes(version string) (string, error) {
	_, build, ok := strings.Cut(version, "+")
	if !ok {
		return "", nil
	}
	release, ok := strings.CutPrefix(build, "k8s.")
	if !ok {
		return "", fmt.Errorf("volcano %s: a rebuild is named <release>+k8s.<major>.<minor>.<patch>", version)
	}
	return "v" + release, nil
}

// kubernetesLibraries are the replaces that move an upstream go.mod to
// Kubernetes release kubernetes ("" is none): k8s.io/kubernetes itself, and
// each k8s.io replace pinned to a version of the same minor (the staging
// modules, v0.<minor>.<patch>) at that release's patch. Other k8s.io
// replaces (klog, utils, kube-openapi) are versioned on their own and stay.
func kubernetesLibraries(file string, data []byte, kubernetes string) (map[string]string, error) {
	overrides := map[string]string{}
	if kubernetes == "" {
		return overrides, nil
	}
	if !semver.IsValid(kubernetes) || semver.Major(kubernetes) != "v1" || semver.Prerelease(kubernetes) != "" {
		return nil, fmt.Errorf("kubernetes libraries %q: want a release v1.<minor>.<patch>", kubernetes)
	}
	staging := "v0" + strings.TrimPrefix(semver.Canonical(kubernetes), "v1")
	upstream, err := modfile.Parse(file, data, nil)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", file, err)
	}
	for _, r := range upstream.Replace {
		if strings.HasPrefix(r.Old.Path, "k8s.io/") && r.New.Path == r.Old.Path &&
			semver.MajorMinor(r.New.Version) == semver.MajorMinor(staging) {
			overrides[r.Old.Path] = staging
		}
	}
	if len(overrides) == 0 {
		return nil, fmt.Errorf("%s pins no k8s.io module of Kubernetes %s's minor (%s): nothing to move", file, kubernetes, semver.MajorMinor(staging))
	}
	overrides["k8s.io/kubernetes"] = kubernetes
	return overrides, nil
}

// dependentGoModFrom is dependentGoMod on the upstream go.mod's content.
func dependentGoModFrom(name, module, version, file string, data []byte, overrides map[string]string) (string, error) {
	upstream, err := modfile.Parse(file, data, nil)
	if err != nil {
		return "", fmt.Errorf("parsing the go.mod of %s: %w", module, err)
	}
	f := &modfile.File{}
	if err := f.AddModuleStmt("gpulab.local/build/" + name); err != nil {
		return "", err
	}
	if err := f.AddGoStmt("1.26.0"); err != nil {
		return "", err
	}
	if err := f.AddRequire(module, version); err != nil {
		return "", err
	}
	for _, r := range upstream.Replace {
		if _, ok := overrides[r.Old.Path]; ok {
			continue
		}
		if r.New.Version == "" && (strings.HasPrefix(r.New.Path, "./") || strings.HasPrefix(r.New.Path, "../")) {
			return "", fmt.Errorf("%s@%s replaces %s with its folder %s, which a dependent module cannot use: "+
				"the testbed must replace it with a released version", module, version, r.Old.Path, r.New.Path)
		}
		if err := f.AddReplace(r.Old.Path, r.Old.Version, r.New.Path, r.New.Version); err != nil {
			return "", err
		}
	}
	for _, path := range slices.Sorted(maps.Keys(overrides)) {
		if err := f.AddReplace(path, "", path, overrides[path]); err != nil {
			return "", err
		}
	}
	out, err := f.Format()
	return string(out), err
}
