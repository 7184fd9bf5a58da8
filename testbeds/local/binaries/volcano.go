package binaries

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/mod/modfile"
)

// Volcano pins its Kubernetes dependencies with a replace block, which a
// dependent module must repeat; the throwaway module copies it verbatim.
var volcano = component{
	name:     "volcano",
	version:  VolcanoVersion,
	binaries: []string{"vc-scheduler", "vc-controller-manager"},
	build: func(ctx context.Context, b *builder, out string) error {
		src, err := b.srcDir("volcano", VolcanoVersion)
		if err != nil {
			return err
		}
		goMod, err := dependentGoMod(ctx, b, "volcano", "volcano.sh/volcano", VolcanoVersion)
		if err != nil {
			return err
		}
		tools := "//go:build tools\n\npackage tools\n\nimport (\n\t_ \"volcano.sh/volcano/cmd/controller-manager\"\n\t_ \"volcano.sh/volcano/cmd/scheduler\"\n)\n"
		if err := writeFiles(src, map[string]string{"go.mod": goMod, "tools.go": tools}); err != nil {
			return err
		}
		if err := b.goCmd(ctx, src, "volcano", nil, "mod", "tidy"); err != nil {
			return err
		}
		for bin, pkg := range map[string]string{
			"vc-scheduler":          "volcano.sh/volcano/cmd/scheduler",
			"vc-controller-manager": "volcano.sh/volcano/cmd/controller-manager",
		} {
			if err := b.goCmd(ctx, src, "volcano", nil, "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(out, bin), pkg); err != nil {
				return err
			}
		}
		return nil
	},
}

// dependentGoMod is the go.mod of a throwaway module named after name that
// requires module at version and repeats the replace directives of that
// module's own go.mod: a replace applies only in the main module, so a
// dependent that leaves them out would build against other versions.
func dependentGoMod(ctx context.Context, b *builder, name, module, version string) (string, error) {
	info, err := b.download(ctx, module, version)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(info.GoMod)
	if err != nil {
		return "", err
	}
	upstream, err := modfile.Parse(info.GoMod, data, nil)
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
		if err := f.AddReplace(r.Old.Path, r.Old.Version, r.New.Path, r.New.Version); err != nil {
			return "", err
		}
	}
	out, err := f.Format()
	return string(out), err
}
