package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gpulab/gpulab/"

// floor is a top-level folder's floor; a folder not named is on top.
func floor(pkg string) int {
	switch top, _, _ := strings.Cut(strings.TrimPrefix(pkg, module), "/"); top {
	case "api", "internal":
		return 0
	case "testbeds":
		return 1
	}
	return 2
}

// TestNoImportRunsUp lists every package's imports with go list and fails
// on one into a higher floor. Product code is held to it strictly. Tests
// may use the testbeds (a real API server is how they check the lower
// floors), but a test of api/ or internal/ never reaches the top floor.
func TestNoImportRunsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("lists every package with go list; skipped with -short")
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	packages := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), "|", 3)
		if len(fields) != 3 {
			t.Fatalf("go list printed %q", sc.Text())
		}
		pkg, own := fields[0], floor(fields[0])
		packages++
		for _, imp := range strings.Fields(fields[1]) {
			if strings.HasPrefix(imp, module) && floor(imp) > own {
				t.Errorf("%s imports %s, a higher floor", pkg, imp)
			}
		}
		for _, imp := range strings.Fields(fields[2]) {
			if strings.HasPrefix(imp, module) && own == 0 && floor(imp) == 2 {
				t.Errorf("a test of %s imports %s, on the top floor", pkg, imp)
			}
		}
	}
	if packages < 20 {
		t.Fatalf("go list found %d packages; the check saw too little to mean anything", packages)
	}
}
