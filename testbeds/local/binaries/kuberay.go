package binaries

import (
	"context"
	"path/filepath"
)

// kuberayModule is KubeRay's operator. Its main package is the module root,
// and its CRDs are in config/crd/bases of the same module.
const kuberayModule = "github.com/ray-project/kuberay/ray-operator"

// kuberay builds KubeRay's operator in a throwaway module, like Volcano: a
// replace directive KubeRay's go.mod may carry must be repeated by the
// module that builds it (v1.5.0 has none).
var kuberay = component{
	name:     "kuberay",
	version:  KubeRayVersion,
	binaries: []string{"ray-operator"},
	build: func(ctx context.Context, b *builder, out string) error {
		src, err := b.srcDir("kuberay", KubeRayVersion)
		if err != nil {
			return err
		}
		goMod, err := dependentGoMod(ctx, b, "kuberay", kuberayModule, KubeRayVersion)
		if err != nil {
			return err
		}
		tools := "//go:build tools\n\npackage tools\n\nimport _ \"" + kuberayModule + "\"\n"
		if err := writeFiles(src, map[string]string{"go.mod": goMod, "tools.go": tools}); err != nil {
			return err
		}
		if err := b.goCmd(ctx, src, "kuberay", nil, "mod", "tidy"); err != nil {
			return err
		}
		return b.goCmd(ctx, src, "kuberay", nil, "build", "-trimpath", "-ldflags=-s -w",
			"-o", filepath.Join(out, "ray-operator"), kuberayModule)
	},
}
