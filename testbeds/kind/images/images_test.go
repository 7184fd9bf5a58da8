package images

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDockerfileAndValidate(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pause")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := Recipe{Ref: "registry.k8s.io/pause:3.10.2", Base: "scratch", Files: map[string]string{"/pause": bin},
		Entrypoint: []string{"/pause"}, User: "65532:65532", StopSignal: "SIGTERM"}
	want := "FROM scratch\nCOPY files/ /\nENV PATH=" + DefaultPath + "\nUSER 65532:65532\nSTOPSIGNAL SIGTERM\nENTRYPOINT [\"/pause\"]\n"
	if got := r.Dockerfile(); got != want {
		t.Errorf("Dockerfile:\n%s\nwant:\n%s", got, want)
	}
	if err := r.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for _, bad := range []Recipe{
		{Base: "scratch"},
		{Ref: "x:1", Base: "scratch", Files: map[string]string{"relative": bin}},
		{Ref: "x:1", Base: "scratch", Files: map[string]string{"/a/../b": bin}},
		{Ref: "x:1", Base: "scratch", Files: map[string]string{"/missing": filepath.Join(dir, "missing")}},
		{Ref: "x:1", Base: "scratch", Files: map[string]string{"/dir": dir}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", bad)
		}
	}
}

func TestHashFollowsFileContent(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	write := func(s string) {
		if err := os.WriteFile(bin, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	r := Recipe{Ref: "x:1", Base: "scratch", Files: map[string]string{"/bin": bin}}
	ctx := context.Background()
	h1, err := r.Hash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.Hash(ctx); again != h1 {
		t.Error("the hash of one recipe changed between calls")
	}
	write("two")
	if h2, _ := r.Hash(ctx); h2 == h1 {
		t.Error("the hash ignores a file's content")
	}
	r.Entrypoint = []string{"/bin"}
	if h3, _ := r.Hash(ctx); h3 == h1 || strings.TrimSpace(h3) == "" {
		t.Error("the hash ignores the Dockerfile")
	}
}
