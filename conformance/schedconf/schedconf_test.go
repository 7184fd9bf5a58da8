package schedconf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

func TestEvicting(t *testing.T) {
	for conf, want := range map[string][]string{
		`actions: "enqueue, allocate, backfill"`:                    nil,
		`actions: "enqueue, allocate, preempt, backfill"`:           {"preempt"},
		"actions: \"enqueue,reclaim, allocate,preempt\"\ntiers: []": {"reclaim", "preempt"},
	} {
		got, err := Evicting(conf)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Evicting(%q) = %v, %v; want %v", conf, got, err, want)
		}
	}
	for _, bad := range []string{"tiers: []", "actions: [", ""} {
		if _, err := Evicting(bad); err == nil {
			t.Errorf("Evicting(%q) accepted", bad)
		}
	}
}

// The configuration Volcano's own manifests install (the one the kind
// testbed applies) is read as it is: no evicting action.
func TestVolcanoInstallerConfiguration(t *testing.T) {
	set, err := binaries.Lookup(t.Context(), binaries.Options{})
	if err != nil {
		t.Fatalf("the testbed binaries (make testbed-binaries): %v", err)
	}
	data, err := os.ReadFile(filepath.Join(set.VolcanoModuleDir, "installer", "volcano-development.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		if !strings.Contains(doc, "name: "+ConfigMapName) {
			continue
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			t.Fatal(err)
		}
		got, err := Evicting(cm.Data[Key])
		if err != nil || len(got) != 0 {
			t.Errorf("Volcano's installed configuration: %v, %v; want no evicting action", got, err)
		}
		return
	}
	t.Fatalf("no %s in Volcano's installer manifest", ConfigMapName)
}
