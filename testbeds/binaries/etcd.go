package binaries

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// etcd's root module replaces its siblings with relative paths, so it cannot
// be `go install`ed; a throwaway module that calls etcdmain builds the same
// server.
var etcd = component{
	name:     "etcd",
	version:  EtcdVersion,
	binaries: []string{"etcd"},
	build: func(ctx context.Context, b *builder, out string) error {
		src, err := b.srcDir("etcd", EtcdVersion)
		if err != nil {
			return err
		}
		files := map[string]string{
			"go.mod": fmt.Sprintf("module gpulab.local/build/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n", EtcdVersion),
			"main.go": `package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`,
		}
		if err := writeFiles(src, files); err != nil {
			return err
		}
		if err := b.goCmd(ctx, src, "etcd", nil, "mod", "tidy"); err != nil {
			return err
		}
		return b.goCmd(ctx, src, "etcd", nil, "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(out, "etcd"), ".")
	},
}

func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
