package incluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxStored is what one ConfigMap holds with room to spare (the API
// server's limit is 1 MiB for the whole object).
const maxStored = 900 << 10

// IndexKey is, in a run's first ConfigMap, the Index of its parts.
const IndexKey = "index.json"

// Index is how a run's packed results are split across its ConfigMaps:
// the archive is the parts' ResultsKey data in order.
type Index struct {
	// Parts are the ConfigMaps' names, the first one's own first.
	Parts []string `json:"parts"`
	// Size and SHA256 are the whole archive's, checked on retrieve.
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
	// Dropped are the logs left out so the rest would fit.
	Dropped []string `json:"dropped,omitempty"`
}

// Stored says where Store put the results, and what it left out.
type Stored struct {
	Parts   []string
	Dropped []string
}

// logsDir is the run's logs folder, the one thing Store drops to fit.
const logsDir = "logs"

// Store packs dir (Retrieve's names: results, logs and perfdata) into the
// ConfigMap name and as many of its PartNames as it needs, with the
// verdict as an annotation and the Index on the first. When even
// MaxParts are too few, logs are left out, largest first, and the Index
// names them. Each ConfigMap is updated where it exists (the runner may
// update only the ones Submit made for it) and created where not.
func Store(ctx context.Context, c client.Client, namespace, name, runID, verdict, dir string) (Stored, error) {
	files, err := storedFiles(dir)
	if err != nil {
		return Stored{}, err
	}
	limit := maxStored * MaxParts
	var dropped []string
	data, err := pack(dir, files)
	for err == nil && len(data) > limit {
		i := largestLog(files)
		if i < 0 {
			return Stored{}, fmt.Errorf("the results of run %s are %d KiB packed without their logs, more than %d ConfigMaps hold",
				runID, len(data)>>10, MaxParts)
		}
		dropped = append(dropped, files[i].rel)
		files = slices.Delete(files, i, i+1)
		data, err = pack(dir, files)
	}
	if err != nil {
		return Stored{}, err
	}
	names := PartNames(name)
	sum := sha256.Sum256(data)
	idx := Index{Size: len(data), SHA256: hex.EncodeToString(sum[:]), Dropped: dropped}
	var chunks [][]byte
	for rest := data; len(rest) > 0 || len(chunks) == 0; {
		n := min(len(rest), maxStored)
		chunks, rest = append(chunks, rest[:n]), rest[n:]
	}
	idx.Parts = names[:len(chunks)]
	index, err := json.Marshal(idx)
	if err != nil {
		return Stored{}, err
	}
	labels := map[string]string{RunnerLabel: runID}
	// The parts first, the index last: a reader never finds an index
	// naming a part not written yet.
	for i := len(chunks) - 1; i >= 0; i-- {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: names[i], Labels: labels},
			BinaryData: map[string][]byte{ResultsKey: chunks[i]}}
		if i == 0 {
			cm.Annotations = map[string]string{VerdictAnnotation: verdict}
			cm.Data = map[string]string{IndexKey: string(index)}
		}
		if err := upsert(ctx, c, cm); err != nil {
			return Stored{}, fmt.Errorf("storing the results in ConfigMap %s/%s: %w", namespace, cm.Name, err)
		}
	}
	// A part left from an earlier, larger store of the same name would
	// only take room: emptied, where it holds anything.
	for _, stale := range names[len(chunks):] {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: stale}, &cm); err != nil || len(cm.BinaryData)+len(cm.Data) == 0 {
			continue
		}
		cm.BinaryData, cm.Data = nil, nil
		if err := c.Update(ctx, &cm); err != nil {
			return Stored{}, fmt.Errorf("emptying the stale results ConfigMap %s/%s: %w", namespace, stale, err)
		}
	}
	return Stored{Parts: idx.Parts, Dropped: dropped}, nil
}

// upsert updates cm's data, labels and annotations where it exists, and
// creates it where not. Get first: the runner may not create, so a
// create that would find it there would be refused, not conflict.
func upsert(ctx context.Context, c client.Client, cm *corev1.ConfigMap) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var old corev1.ConfigMap
		err := c.Get(ctx, client.ObjectKeyFromObject(cm), &old)
		if apierrors.IsNotFound(err) {
			return c.Create(ctx, cm.DeepCopy())
		}
		if err != nil {
			return err
		}
		old.BinaryData, old.Data = cm.BinaryData, cm.Data
		old.Labels = mergeMaps(old.Labels, cm.Labels)
		old.Annotations = mergeMaps(old.Annotations, cm.Annotations)
		return c.Update(ctx, &old)
	})
}

func mergeMaps(into, from map[string]string) map[string]string {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = map[string]string{}
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

// storedFile is one file Store packs.
type storedFile struct {
	rel  string // slash-separated, relative to the results folder
	size int64
}

// storedFiles are dir's regular files that Retrieve accepts (allowedName),
// in lexical order; anything else the run left there stays behind.
func storedFiles(dir string) ([]storedFile, error) {
	var files []storedFile
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !allowedName(rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, storedFile{rel: rel, size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("packing %s: %w", dir, err)
	}
	return files, nil
}

// largestLog is the index of the largest file under logs/, -1 if none.
func largestLog(files []storedFile) int {
	at := -1
	for i, f := range files {
		if strings.HasPrefix(f.rel, logsDir+"/") && (at < 0 || f.size > files[at].size) {
			at = i
		}
	}
	return at
}

// pack is files of dir as a gzipped tar.
func pack(dir string, files []storedFile) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.rel)))
		if err != nil {
			return nil, fmt.Errorf("packing %s: %w", dir, err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.rel, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
