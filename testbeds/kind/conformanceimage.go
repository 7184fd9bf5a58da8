package kind

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpulab/gpulab/testbeds/kind/images"
	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
	"github.com/gpulab/gpulab/testbeds/kind/nodeimage"
)

// ConformanceImage is the suite's image as the kind tests load it: the
// in-cluster runner of `gpulab-conformance submit`.
const ConformanceImage = "gpulab-conformance:dev"

// BuildConformanceImage builds the suite binary (with the version stamp)
// and its image, also tagged with the VERSION file's version. The suite
// links glibc (go-nvml needs cgo), so its base is the node image's Debian
// root, built by debootstrap; it runs as 65532, as the runner's restricted
// pod requires. It returns the image's references.
func BuildConformanceImage(ctx context.Context, cacheDir, root string, log io.Writer) ([]string, error) {
	if log == nil {
		log = io.Discard
	}
	work := filepath.Join(cacheDir, "kind", "build")
	bin := filepath.Join(work, "bin", "gpulab-conformance")
	stamp, err := command.Output(ctx, command.Cmd{Name: "go", Dir: root, Args: []string{"run", "./internal/version/cmd/stamp"}})
	if err != nil {
		return nil, fmt.Errorf("stamping the version: %w", err)
	}
	if err := command.Run(ctx, command.GoBuild{Pkg: "./conformance", Out: bin, Dir: root, Test: true,
		LDFlags: strings.TrimSpace(stamp), Log: log}.Cmd()); err != nil {
		return nil, fmt.Errorf("building the suite: %w", err)
	}
	base, err := nodeimage.EnsureBase(ctx, nodeimage.Options{CacheDir: cacheDir, RepoRoot: root, Log: log})
	if err != nil {
		return nil, err
	}
	r := images.Recipe{Ref: ConformanceImage, Base: base,
		Files: map[string]string{"/usr/local/bin/gpulab-conformance": bin}, Entrypoint: []string{"/usr/local/bin/gpulab-conformance"},
		User: "65532:65532"}
	if _, err := images.Build(ctx, r, images.Options{WorkDir: work, Log: log}); err != nil {
		return nil, err
	}
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return nil, err
	}
	tagged := "gpulab-conformance:" + strings.TrimSpace(string(version))
	if err := command.Run(ctx, command.Cmd{Name: "docker", Args: []string{"tag", ConformanceImage, tagged}, Log: log}); err != nil {
		return nil, fmt.Errorf("tagging %s: %w", tagged, err)
	}
	return []string{ConformanceImage, tagged}, nil
}
