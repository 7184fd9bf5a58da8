package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreCurrent regenerates deepcopy code and CRDs with the
// pinned controller-gen (a tool in go.mod) and fails if the committed files
// differ: run `make generate manifests` after changing the types.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen; skipped with -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	objDir, crdDir := filepath.Join(tmp, "object"), filepath.Join(tmp, "crd")
	run := func(args ...string) {
		cmd := exec.Command("go", append([]string{"tool", "controller-gen"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, out)
		}
	}
	// These arguments must match the Makefile's generate and manifests targets.
	run("object:headerFile=hack/boilerplate.go.txt", "paths=./api/...", "output:object:dir="+objDir)
	run("crd:generateEmbeddedObjectMeta=true,maxDescLen=0", "paths=./api/...", "output:crd:artifacts:config="+crdDir)
	rbacDir := filepath.Join(tmp, "rbac")
	run("rbac:roleName=gpulab-operator", "paths=./operator/...", "output:rbac:artifacts:config="+rbacDir)

	compareDirs(t, objDir, filepath.Join(root, "api", "v1alpha1"), "zz_generated.*.go")
	compareDirs(t, crdDir, filepath.Join(root, "operator", "config", "crd", "bases"), "*.yaml")
	compareDirs(t, rbacDir, filepath.Join(root, "operator", "config", "rbac"), "role.yaml")
}

// compareDirs fails for every file matching pattern that differs between the
// fresh and committed folders, or exists in only one of them.
func compareDirs(t *testing.T, fresh, committed, pattern string) {
	t.Helper()
	want, _ := filepath.Glob(filepath.Join(fresh, pattern))
	got, _ := filepath.Glob(filepath.Join(committed, pattern))
	if len(want) == 0 {
		t.Errorf("controller-gen generated nothing matching %s", pattern)
	}
	if len(want) != len(got) {
		t.Errorf("%s: %d generated files, %d committed; run `make generate manifests`", committed, len(want), len(got))
	}
	for _, f := range want {
		name := filepath.Base(f)
		a, _ := os.ReadFile(f)
		b, err := os.ReadFile(filepath.Join(committed, name))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s is stale; run `make generate manifests`", filepath.Join(committed, name))
		}
	}
}
