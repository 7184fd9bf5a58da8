package binaries

import (
	"context"
	"path/filepath"
)

// kuberayModule is KubeRay's operator. Its main package is the module root,
// and its CRDs are in config/crd/bases of the same module.
const kuberayModule = "github.com/ray-project/kuberay/ray-operator"

// kuberayReleases are the KubeRay operator versions the testbed builds.
// Neither carries a replace directive; flags and CRD paths are the same in
// both (the local testbed's kuberay.go).
var kuberayReleases = map[string]struct{}{
	"v1.5.0": {},
	"v1.6.2": {},
}

// kuberayUnbuildable says why a version that was tried does not build.
var kuberayUnbuildable = map[string]string{
	"v1.6.3": "the Go module proxy serves its .info and .mod but refuses its zip",
	"v1.7.0": "the Go module proxy serves its .info and .mod but refuses its zip",
}

// kuberayComponent builds KubeRay's operator in a throwaway module, like
// Volcano: a replace directive KubeRay's go.mod may carry must be repeated
// by the module that builds it.
func kuberayComponent(version string) component {
	return component{
		name:     "kuberay",
		version:  version,
		binaries: []string{"ray-operator"},
		build: func(ctx context.Context, b *builder, out string) error {
			src, err := b.srcDir("kuberay", version)
			if err != nil {
				return err
			}
			goMod, err := dependentGoMod(ctx, b, "kuberay", kuberayModule, version, nil)
			if err != nil {
				return err
			}
			tools := "//go:build tools\n\npackage tools\n\nimport _ \"" + kuberayModule + "\"\n"
			if err := writeFiles(src, map[string]string{"go.mod": goMod, "tools.go": tools}); err != nil {
				return err
			}
			logName := "kuberay-" + version
			if err := b.goCmd(ctx, src, logName, nil, "mod", "tidy"); err != nil {
				return err
			}
			return b.goCmd(ctx, src, logName, nil, "build", "-trimpath", "-ldflags=-s -w",
				"-o", filepath.Join(out, "ray-operator"), kuberayModule)
		},
	}
}
