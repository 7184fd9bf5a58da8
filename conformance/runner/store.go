package runner

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxStored is what a ConfigMap holds with room to spare (the API server's
// limit is 1 MiB for the whole object).
const maxStored = 900 << 10

// Store packs dir's files (not its subfolders' logs past the size limit)
// into the run's ConfigMap, with the verdict as an annotation. A run too
// large for one is stored without its logs, and says so.
func Store(ctx context.Context, c client.Client, namespace, name, runID, verdict, dir string) error {
	data, err := pack(dir, true)
	if err == nil && len(data) > maxStored {
		data, err = pack(dir, false)
	}
	if err != nil {
		return err
	}
	if len(data) > maxStored {
		return fmt.Errorf("the results of run %s are %d KiB packed, more than a ConfigMap holds", runID, len(data)>>10)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{RunnerLabel: runID},
			Annotations: map[string]string{VerdictAnnotation: verdict}},
		BinaryData: map[string][]byte{ResultsKey: data},
	}
	err = c.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		var old corev1.ConfigMap
		if err = c.Get(ctx, client.ObjectKeyFromObject(cm), &old); err == nil {
			cm.ResourceVersion = old.ResourceVersion
			err = c.Update(ctx, cm)
		}
	}
	if err != nil {
		return fmt.Errorf("storing the results in ConfigMap %s/%s: %w", namespace, name, err)
	}
	return nil
}

// pack is dir as a gzipped tar; withSubdirs includes the logs folders.
func pack(dir string, withSubdirs bool) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() {
			if !withSubdirs {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Retrieve unpacks the run's stored results into dir and returns the
// files written. A name that would leave dir is refused.
func Retrieve(ctx context.Context, c client.Client, namespace, runID, dir string) ([]string, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ConfigMapName(runID)}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("run %s has stored no results yet (gpulab-conformance status --run-id %s): %w", runID, runID, err)
		}
		return nil, err
	}
	gz, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[ResultsKey]))
	if err != nil {
		return nil, fmt.Errorf("the results of run %s: %w", runID, err)
	}
	tr := tar.NewReader(gz)
	var files []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("the results of run %s: %w", runID, err)
		}
		rel := filepath.Clean(filepath.FromSlash(h.Name))
		if !filepath.IsLocal(rel) || h.Typeflag != tar.TypeReg {
			return files, fmt.Errorf("the results of run %s hold %q, which is not a file inside %s", runID, h.Name, dir)
		}
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return files, err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return files, err
		}
		_, err = io.Copy(f, io.LimitReader(tr, h.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return files, err
		}
		files = append(files, rel)
	}
}
