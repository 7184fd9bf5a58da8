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
	release := volcanoReleases[version]
	return component{
		name:     "volcano",
		version:  version,
		binaries: []string{"vc-scheduler", "vc-controller-manager"},
		build: func(ctx context.Context, b *builder, out string) error {
			src, err := b.srcDir("volcano", version)
			if err != nil {
				return err
			}
			var overrides map[string]string
			if release.apis != "" {
				overrides = map[string]string{"volcano.sh/apis": release.apis}
			}
			goMod, err := dependentGoMod(ctx, b, "volcano", "volcano.sh/volcano", version, overrides)
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
	info, err := b.download(ctx, module, version)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(info.GoMod)
	if err != nil {
		return "", err
	}
	return dependentGoModFrom(name, module, version, info.GoMod, data, overrides)
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
