package binaries

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// kubernetesCommands are the k8s.io/kubernetes programs the testbed runs.
var kubernetesCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
// with ./staging paths, which a dependent module cannot see. A throwaway
// module re-adds those replaces, pointing at the published v0.<minor>.<patch>
// tags, and builds the commands with the version stamped in, because kwokctl
// reads `--version` to choose flags.
var kubernetes = component{
	name:     "kubernetes",
	version:  KubernetesVersion,
	binaries: kubernetesCommands, // kube-apiserver alone takes ~6-9 minutes cold
	build:    buildKubernetes("kubernetes", kubernetesCommands),
}

// buildKubernetes builds commands of k8s.io/kubernetes/cmd in a throwaway
// module named name; every such module has the same go.mod, so the builds
// share the build cache but never each other's files.
func buildKubernetes(name string, commands []string) func(context.Context, *builder, string) error {
	return func(ctx context.Context, b *builder, out string) error {
		src, err := b.srcDir(name, KubernetesVersion)
		if err != nil {
			return err
		}
		goMod, err := kubernetesGoMod(ctx, b)
		if err != nil {
			return err
		}
		var tools strings.Builder
		tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
		for _, c := range commands {
			fmt.Fprintf(&tools, "\t_ %q\n", "k8s.io/kubernetes/cmd/"+c)
		}
		tools.WriteString(")\n")
		if err := writeFiles(src, map[string]string{"go.mod": goMod, "tools.go": tools.String()}); err != nil {
			return err
		}
		if err := b.goCmd(ctx, src, name, nil, "mod", "tidy"); err != nil {
			return err
		}
		ldflags := append([]string{"-s", "-w"}, kubernetesVersionLDFlags()...)
		for _, c := range commands {
			fmt.Fprintf(b.opts.Log, "  building %s\n", c)
			if err := b.goCmd(ctx, src, name, nil, "build", "-trimpath", "-ldflags="+strings.Join(ldflags, " "),
				"-o", filepath.Join(out, c), "k8s.io/kubernetes/cmd/"+c); err != nil {
				return err
			}
		}
		return nil
	}
}

// kubernetesGoMod renders the throwaway go.mod: require k8s.io/kubernetes and
// replace every staging module it requires at v0.0.0.
func kubernetesGoMod(ctx context.Context, b *builder) (string, error) {
	info, err := b.download(ctx, "k8s.io/kubernetes", KubernetesVersion)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(info.GoMod)
	if err != nil {
		return "", err
	}
	upstream, err := modfile.ParseLax(info.GoMod, data, nil)
	if err != nil {
		return "", fmt.Errorf("parsing k8s.io/kubernetes go.mod: %w", err)
	}
	staging := "v0" + strings.TrimPrefix(KubernetesVersion, "v1")
	f := &modfile.File{}
	if err := f.AddModuleStmt("gpulab.local/build/kubernetes"); err != nil {
		return "", err
	}
	if err := f.AddGoStmt("1.26.0"); err != nil {
		return "", err
	}
	if err := f.AddRequire("k8s.io/kubernetes", KubernetesVersion); err != nil {
		return "", err
	}
	for _, r := range upstream.Require {
		if r.Mod.Version == "v0.0.0" && strings.HasPrefix(r.Mod.Path, "k8s.io/") {
			if err := f.AddReplace(r.Mod.Path, "", r.Mod.Path, staging); err != nil {
				return "", err
			}
		}
	}
	out, err := f.Format()
	return string(out), err
}

// kubernetesVersionLDFlags stamps the version the way the Kubernetes release
// build does, into both places components read it from.
func kubernetesVersionLDFlags() []string {
	parts := strings.SplitN(strings.TrimPrefix(KubernetesVersion, "v"), ".", 3)
	vars := map[string]string{
		"gitVersion":   KubernetesVersion,
		"gitMajor":     parts[0],
		"gitMinor":     parts[1],
		"gitTreeState": "clean",
		"gitCommit":    "0000000000000000000000000000000000000000",
		"buildDate":    "1970-01-01T00:00:00Z",
	}
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags, ldflagsX(pkg, vars)...)
	}
	return flags
}
