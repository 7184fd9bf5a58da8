// Package images builds container images from binaries compiled on this
// machine, without a registry: each image is a Recipe (a reference, a base,
// the files it holds) that becomes a generated Dockerfile and a build
// context of hard links. An image is rebuilt only when its recipe or the
// content of its files changes (a label holds the recipe's hash).
package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
)

// HashLabel holds the hash of the recipe an image was built from.
const HashLabel = "io.gpulab.recipe-hash"

// DefaultPath is the PATH of images that set none: the binaries live in
// /usr/local/bin, as in the upstream images.
const DefaultPath = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

// Recipe is one image.
type Recipe struct {
	// Ref is the image's reference, e.g. registry.k8s.io/pause:3.10.2.
	Ref string
	// Base is "scratch" or a local image reference.
	Base string
	// Files maps an absolute path in the image to a file on this machine.
	Files map[string]string
	// Entrypoint of the image; none when empty.
	Entrypoint []string
	// Env entries (KEY=value). PATH defaults to DefaultPath.
	Env []string
	// User the image runs as; root when empty.
	User string
	// StopSignal is what `docker stop` sends; SIGTERM when empty.
	StopSignal string
}

// Dockerfile renders the recipe; files are copied from the context's
// folder "files" under their image paths.
func (r Recipe) Dockerfile() string {
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\n", r.Base)
	if len(r.Files) > 0 {
		b.WriteString("COPY files/ /\n")
	}
	env := r.Env
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append([]string{"PATH=" + DefaultPath}, env...)
	}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&b, "ENV %s=%s\n", k, v)
	}
	if r.User != "" {
		fmt.Fprintf(&b, "USER %s\n", r.User)
	}
	if r.StopSignal != "" {
		fmt.Fprintf(&b, "STOPSIGNAL %s\n", r.StopSignal)
	}
	if len(r.Entrypoint) > 0 {
		ep, _ := json.Marshal(r.Entrypoint)
		fmt.Fprintf(&b, "ENTRYPOINT %s\n", ep)
	}
	return b.String()
}

// Validate reports a recipe that can never build.
func (r Recipe) Validate() error {
	var errs []error
	if r.Ref == "" || r.Base == "" {
		errs = append(errs, errors.New("the reference and the base are required"))
	}
	for dst, src := range r.Files {
		if !path.IsAbs(dst) || path.Clean(dst) != dst {
			errs = append(errs, fmt.Errorf("image path %q must be absolute and clean", dst))
		}
		if st, err := os.Stat(src); err != nil {
			errs = append(errs, err)
		} else if !st.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("%s is not a regular file", src))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("image %s: %w", r.Ref, err)
	}
	return nil
}

// Hash identifies what the recipe builds: the Dockerfile, the base image's
// ID and every file's path, mode and content.
func (r Recipe) Hash(ctx context.Context) (string, error) {
	h := sha256.New()
	_, _ = io.WriteString(h, r.Dockerfile()) // a hash never fails to write
	if r.Base != "scratch" {
		id, err := ImageID(ctx, r.Base)
		if err != nil {
			return "", err
		}
		_, _ = io.WriteString(h, id)
	}
	for _, dst := range slices.Sorted(maps.Keys(r.Files)) {
		if err := hashFile(h, dst, r.Files[dst]); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(h io.Writer, name, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "\x00%s\x00%o\x00%d\x00", name, st.Mode().Perm(), st.Size())
	_, err = io.Copy(h, f)
	return err
}

// Options configures Build.
type Options struct {
	// WorkDir holds the build contexts (removed after each build). Required.
	WorkDir string
	// Log receives docker's output. Defaults to io.Discard.
	Log io.Writer
}

// Build builds the image unless one with the recipe's hash exists; it
// reports whether it built.
func Build(ctx context.Context, r Recipe, opts Options) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	hash, err := r.Hash(ctx)
	if err != nil {
		return false, fmt.Errorf("image %s: %w", r.Ref, err)
	}
	if label(ctx, r.Ref, HashLabel) == hash {
		return false, nil
	}
	dir, err := os.MkdirTemp(opts.WorkDir, "image-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	for dst, src := range r.Files {
		if err := Link(src, filepath.Join(dir, "files", filepath.FromSlash(dst))); err != nil {
			return false, err
		}
	}
	dockerfile := r.Dockerfile() + fmt.Sprintf("LABEL %s=%s\n", HashLabel, hash)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		return false, err
	}
	if err := command.Run(ctx, command.Cmd{Name: "docker", Args: []string{"build", "-q", "-t", r.Ref, dir}, Log: opts.Log}); err != nil {
		return false, fmt.Errorf("building image %s: %w", r.Ref, err)
	}
	return true, nil
}

// Link places src at dst by a hard link (a copy across file systems),
// creating dst's folder.
func Link(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ImageID is a local image's ID; an error if there is no such image.
func ImageID(ctx context.Context, ref string) (string, error) {
	out, err := command.Output(ctx, command.Cmd{Name: "docker", Args: []string{"image", "inspect", "--format", "{{.Id}}", ref}})
	if err != nil {
		return "", fmt.Errorf("image %s is not built: %w", ref, err)
	}
	return strings.TrimSpace(out), nil
}

// Exists says whether a local image has that reference.
func Exists(ctx context.Context, ref string) bool {
	_, err := ImageID(ctx, ref)
	return err == nil
}

// label is one label of a local image ("" if the image or label is absent).
func label(ctx context.Context, ref, key string) string {
	out, err := command.Output(ctx, command.Cmd{Name: "docker", Args: []string{"image", "inspect", "--format", "{{index .Config.Labels " + fmt.Sprintf("%q", key) + "}}", ref}})
	if err != nil {
		return ""
	}
	v := strings.TrimSpace(out)
	if v == "<no value>" {
		return ""
	}
	return v
}

// Save writes the images into one docker-archive tarball.
func Save(ctx context.Context, refs []string, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return command.Run(ctx, command.Cmd{Name: "docker", Args: append([]string{"save", "-o", out}, refs...)})
}
