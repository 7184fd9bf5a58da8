package incluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/results"
)

// Limits on what Retrieve unpacks: whoever can write the run's ConfigMaps
// (the runner pod's ServiceAccount, an admin) writes the archive, so it
// is checked before anything reaches the disk.
const (
	// MaxRetrievedBytes bounds the unpacked files. A run stores at most
	// 7.2 MiB packed (MaxParts of maxStored); its text expands some 5 to
	// 10 times, so 64 MiB holds any honest run and stops a gzip bomb
	// (a few KiB that expand to gigabytes) early.
	MaxRetrievedBytes = 64 << 20
	// MaxRetrievedEntries bounds the files: a run writes its five results,
	// a perfdata file per measurement and a log per component, tens in
	// all; 1000 leaves room and stops an archive of millions of empties.
	MaxRetrievedEntries = 1000
)

// topLevel are the files the suite writes into its --out folder
// (results.Results.Write); besides them only logs/ and perfdata/ (where
// submit points --perfdata) hold files.
var topLevel = []string{results.ResultsFile, "junit.xml", "report.md", "report.html", results.ProductFile}

var subdirs = []string{logsDir, "perfdata"}

// allowedName says whether rel (slash-separated, clean) is a file the
// suite writes: one of topLevel, or any file under one of subdirs.
func allowedName(rel string) bool {
	if slices.Contains(topLevel, rel) {
		return true
	}
	dir, rest, ok := strings.Cut(rel, "/")
	return ok && slices.Contains(subdirs, dir) && rest != "" && path.Clean(rel) == rel && filepath.IsLocal(filepath.FromSlash(rel))
}

// RetrieveOptions tune Retrieve.
type RetrieveOptions struct {
	// Force replaces files already in the folder; by default Retrieve
	// refuses, writing nothing.
	Force bool
}

// Retrieved is what Retrieve wrote, and what the run had left out.
type Retrieved struct {
	// Files are the paths written, relative to the folder.
	Files []string
	// Dropped are the logs Store left out to fit (Index.Dropped).
	Dropped []string
}

// Retrieve unpacks the run's stored results into dir. It reads the
// archive whole, from every part the Index names, and checks it first:
// within MaxRetrievedBytes and MaxRetrievedEntries, only the suite's own
// file names (allowedName), and, unless Force, no file already in dir.
// Then it writes, through an os.Root, so a link in dir cannot lead a file
// out of it.
func Retrieve(ctx context.Context, c client.Client, namespace, runID, dir string, o RetrieveOptions) (Retrieved, error) {
	name := ConfigMapName(runID)
	var first corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &first); err != nil {
		if apierrors.IsNotFound(err) {
			return Retrieved{}, fmt.Errorf("run %s has stored no results (gpulab-conformance status --run-id %s): %w", runID, runID, err)
		}
		return Retrieved{}, err
	}
	data, idx, err := readParts(ctx, c, &first, name)
	if err != nil {
		return Retrieved{}, fmt.Errorf("the results of run %s: %w", runID, err)
	}
	files, err := unpack(data)
	if err != nil {
		return Retrieved{Dropped: idx.Dropped}, fmt.Errorf("the results of run %s: %w", runID, err)
	}
	written, err := write(dir, files, o.Force)
	return Retrieved{Files: written, Dropped: idx.Dropped}, err
}

// readParts is the archive first and its Index name: the parts' data
// concatenated, checked against the Index's size and digest. A first part
// without an Index is a whole archive (a store of one part, or before
// parts).
func readParts(ctx context.Context, c client.Client, first *corev1.ConfigMap, name string) ([]byte, Index, error) {
	raw, ok := first.Data[IndexKey]
	if !ok {
		if len(first.BinaryData[ResultsKey]) == 0 {
			return nil, Index{}, errors.New("nothing stored yet (the run has not finished)")
		}
		return first.BinaryData[ResultsKey], Index{}, nil
	}
	var idx Index
	if err := json.Unmarshal([]byte(raw), &idx); err != nil {
		return nil, idx, fmt.Errorf("its index: %w", err)
	}
	// Only the run's own parts, whatever the index says: it must not lead
	// the read to another ConfigMap.
	names := PartNames(name)
	if len(idx.Parts) == 0 || len(idx.Parts) > MaxParts || !slices.Equal(idx.Parts, names[:len(idx.Parts)]) {
		return nil, idx, fmt.Errorf("its index names parts %v, not the first of %v", idx.Parts, names)
	}
	if idx.Size < 0 || idx.Size > MaxParts*maxStored {
		return nil, idx, fmt.Errorf("its index says %d bytes, more than %d parts hold", idx.Size, MaxParts)
	}
	data := slices.Clone(first.BinaryData[ResultsKey])
	for _, part := range idx.Parts[1:] {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: first.Namespace, Name: part}, &cm); err != nil {
			return nil, idx, fmt.Errorf("part %s: %w", part, err)
		}
		data = append(data, cm.BinaryData[ResultsKey]...)
	}
	sum := sha256.Sum256(data)
	if len(data) != idx.Size || hex.EncodeToString(sum[:]) != idx.SHA256 {
		return nil, idx, fmt.Errorf("its %d parts hold %d bytes that do not match the index (%d bytes, sha256 %s): stored again while read?",
			len(idx.Parts), len(data), idx.Size, idx.SHA256)
	}
	return data, idx, nil
}

// unpacked is one file of the archive, read and checked.
type unpacked struct {
	rel  string
	data []byte
}

// errTooLarge ends the read of an archive that expands past
// MaxRetrievedBytes.
var errTooLarge = fmt.Errorf("it expands past %d MiB, more than a run writes", MaxRetrievedBytes>>20)

// capped reads at most n bytes of r, then fails with errTooLarge.
type capped struct {
	r io.Reader
	n int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// unpack reads a gzipped tar whole, within the limits, refusing any entry
// that is not a regular file of an allowed name.
func unpack(data []byte) ([]unpacked, error) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	// The cap counts the tar's headers and padding too: a bomb of
	// headers stops as early as one of content.
	tr := tar.NewReader(&capped{r: gz, n: MaxRetrievedBytes + MaxRetrievedEntries*1024})
	var files []unpacked
	seen := map[string]bool{}
	total := int64(0)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if len(files) == MaxRetrievedEntries {
			return nil, fmt.Errorf("it holds more than %d files, more than a run writes", MaxRetrievedEntries)
		}
		rel := path.Clean(h.Name)
		if !filepath.IsLocal(filepath.FromSlash(rel)) || h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("it holds %q, which is not a file inside the folder", h.Name)
		}
		if !allowedName(rel) {
			return nil, fmt.Errorf("it holds %q, which the suite does not write (only %s, and files under %s/)",
				h.Name, strings.Join(topLevel, ", "), strings.Join(subdirs, "/, "))
		}
		if seen[rel] {
			return nil, fmt.Errorf("it holds %q twice", rel)
		}
		seen[rel] = true
		if h.Size < 0 || total+h.Size > MaxRetrievedBytes {
			return nil, errTooLarge
		}
		content, err := io.ReadAll(io.LimitReader(tr, h.Size))
		if err != nil {
			return nil, err
		}
		total += int64(len(content))
		files = append(files, unpacked{rel: rel, data: content})
	}
}

// write puts files into dir: none unless every one is new there (or
// force), each through an os.Root of dir.
func write(dir string, files []unpacked, force bool) ([]string, error) {
	if !force {
		var there []string
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f.rel))); err == nil {
				there = append(there, f.rel)
			}
		}
		if len(there) > 0 {
			return nil, fmt.Errorf("refusing to overwrite %s in %s (--force replaces them)", strings.Join(there, ", "), dir)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	flags := os.O_CREATE | os.O_WRONLY | os.O_EXCL
	if force {
		flags = os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	}
	var written []string
	for _, f := range files {
		rel := filepath.FromSlash(f.rel)
		if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return written, err
		}
		out, err := root.OpenFile(rel, flags, 0o644)
		if err != nil {
			return written, err
		}
		_, err = out.Write(f.data)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return written, err
		}
		written = append(written, rel)
	}
	return written, nil
}
