package binaries

import (
	"context"
	"path/filepath"
)

// karpenterModule is Karpenter's core module; its kwok provider is the main
// package karpenterKwok, its CRDs are in kwok/charts/crds (NodePool,
// NodeClaim, NodeOverlay) and kwok/apis/crds (KWOKNodeClass).
const (
	karpenterModule = "sigs.k8s.io/karpenter"
	karpenterKwok   = karpenterModule + "/kwok"
)

// karpenterEnv is the environment of every go command that reads
// Karpenter's module: its go.mod says go 1.26.9, so the repository's Go
// (1.26.8, GOTOOLCHAIN=local) refuses it; the module proxy serves
// KarpenterGoToolchain, which the go command fetches once into its module
// cache.
var karpenterEnv = []string{"GOTOOLCHAIN=" + KarpenterGoToolchain}

// karpenter builds the kwok provider in a throwaway module, repeating any
// replace directive of Karpenter's go.mod (v1.15.0 has none). The binary is
// karpenter-kwok, so it is not mistaken for sigs.k8s.io/kwok's kwok.
var karpenter = component{
	name:     "karpenter",
	version:  KarpenterVersion,
	binaries: []string{"karpenter-kwok"},
	build: func(ctx context.Context, b *builder, out string) error {
		src, err := b.srcDir("karpenter", KarpenterVersion)
		if err != nil {
			return err
		}
		file, upstream, err := b.goModOf(ctx, karpenterModule, KarpenterVersion, karpenterEnv...)
		if err != nil {
			return err
		}
		goMod, err := dependentGoModFrom("karpenter", karpenterModule, KarpenterVersion, file, upstream, nil)
		if err != nil {
			return err
		}
		tools := "//go:build tools\n\npackage tools\n\nimport _ \"" + karpenterKwok + "\"\n"
		if err := writeFiles(src, map[string]string{"go.mod": goMod, "tools.go": tools}); err != nil {
			return err
		}
		logName := "karpenter-" + KarpenterVersion
		if err := b.goCmd(ctx, src, logName, karpenterEnv, "mod", "tidy"); err != nil {
			return err
		}
		// The karpenter_build_info metric says which release runs.
		ldflags := "-s -w -X " + karpenterModule + "/pkg/operator.Version=" + KarpenterVersion
		return b.goCmd(ctx, src, logName, karpenterEnv, "build", "-trimpath", "-ldflags="+ldflags,
			"-o", filepath.Join(out, "karpenter-kwok"), karpenterKwok)
	},
}

// Karpenter is the built kwok provider of Karpenter and the module source
// its CRDs are read from.
type Karpenter struct {
	// Binary is the karpenter-kwok executable.
	Binary string
	// ModuleDir is sigs.k8s.io/karpenter's source at Version.
	ModuleDir string
	Version   string
}

// EnsureKarpenter builds Karpenter's kwok provider if it is missing from
// the cache. Only a testbed with --autoscaler=karpenter needs it, so no
// other Ensure builds it.
func EnsureKarpenter(ctx context.Context, opts Options) (*Karpenter, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts}
	if err := b.ensureAll(ctx, []component{karpenter}); err != nil {
		return nil, err
	}
	return b.karpenter(ctx)
}

// LookupKarpenter returns Karpenter's kwok provider if it is built, without
// building.
func LookupKarpenter(ctx context.Context, opts Options) (*Karpenter, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts}
	if !b.built(karpenter) {
		return nil, notBuilt(karpenter, opts.CacheDir)
	}
	return b.karpenter(ctx)
}

func (b *builder) karpenter(ctx context.Context) (*Karpenter, error) {
	info, err := b.download(ctx, karpenterModule, KarpenterVersion, karpenterEnv...)
	if err != nil {
		return nil, err
	}
	return &Karpenter{Binary: b.path(karpenter, "karpenter-kwok"), ModuleDir: info.Dir, Version: KarpenterVersion}, nil
}
