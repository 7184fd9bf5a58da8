// Package testbin is what keeps `make test` short, for tests only. Build
// writes each binary a test builds to one place under _artifacts/test-bin,
// not to a fresh temporary directory, so that the next run's `go build`
// finds it up to date and does not link it again: a warm `make test` links
// nothing that did not change. SkipUnlessLong leaves the long tests to
// `make test-long`. Only tests import it.
package testbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpulab/gpulab/internal/repo"
)

// Build runs `go <cmd...> -o PATH <pkg>` in the module root, where cmd is
// "build" or "test", "-c", with any flags, and returns PATH:
// _artifacts/test-bin/<name>. Callers give each binary its own name, as
// tests of different packages may build at once.
func Build(ctx context.Context, name, pkg string, cmd ...string) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", err
	}
	out := filepath.Join(root, "_artifacts", "test-bin", name)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	args := append(append(append([]string{}, cmd...), "-o", out), pkg)
	c := exec.CommandContext(ctx, "go", args...)
	c.Dir = root
	if msg, err := c.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}
