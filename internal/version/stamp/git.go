package stamp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ReadOptions say where Read looks. The zero value reads the current
// directory, the process environment and the clock.
type ReadOptions struct {
	// Dir is the checkout's root, holding VERSION (default ".").
	Dir string
	// Getenv reads SOURCE_DATE_EPOCH (default os.Getenv).
	Getenv func(string) string
	// Now is the build time without SOURCE_DATE_EPOCH (default time.Now).
	Now func() time.Time
}

// Read gathers a Source from a checkout: its VERSION file and, when it is
// a git work tree and git is installed, HEAD's hash, tags and tree state.
// Outside git (a source tarball) the commit stays empty; a git that is
// there but fails is an error.
func Read(ctx context.Context, opts ReadOptions) (Source, error) {
	if opts.Dir == "" {
		opts.Dir = "."
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	data, err := os.ReadFile(filepath.Join(opts.Dir, "VERSION"))
	if err != nil {
		return Source{}, fmt.Errorf("reading the version: %w", err)
	}
	src := Source{VersionFile: string(data), SourceDateEpoch: opts.Getenv("SOURCE_DATE_EPOCH"), Now: opts.Now()}
	if _, err := exec.LookPath("git"); err != nil {
		return src, nil
	}
	inside, err := git(ctx, opts.Dir, "rev-parse", "--is-inside-work-tree")
	if err != nil || inside != "true" {
		return src, nil // not a checkout: nothing to record
	}
	if src.Commit, err = git(ctx, opts.Dir, "rev-parse", "HEAD"); err != nil {
		return Source{}, err
	}
	tags, err := git(ctx, opts.Dir, "tag", "--points-at", "HEAD")
	if err != nil {
		return Source{}, err
	}
	src.HeadTags = strings.Fields(tags)
	status, err := git(ctx, opts.Dir, "status", "--porcelain")
	if err != nil {
		return Source{}, err
	}
	src.Dirty = status != ""
	return src, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
