package cleanup

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestScenarioNamespace(t *testing.T) {
	// Ids sharing their last segment: the old naming kept only "1".
	a, b := ScenarioNamespace("gang", 1, "a-1"), ScenarioNamespace("gang", 1, "b-1")
	if a == b {
		t.Errorf("runs a-1 and b-1 share namespace %s", a)
	}
	if want := "gpulab-conformance-gang-1-a-1"; a != want {
		t.Errorf("ScenarioNamespace = %s, want %s", a, want)
	}
	long := strings.Repeat("x", 40)
	names := map[string]bool{}
	for _, id := range []string{long + "-1", long + "-2", "0102-150405-abcdef"} {
		for _, feature := range []string{"accelerators", "latency"} {
			n := ScenarioNamespace(feature, 12, id)
			if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
				t.Errorf("%s: %v", n, msgs)
			}
			if !strings.HasPrefix(n, "gpulab-conformance-"+feature+"-12-") {
				t.Errorf("%s does not start readably", n)
			}
			if names[n] {
				t.Errorf("%s named twice", n)
			}
			names[n] = true
		}
	}
}

func TestNameCutKeepsALabel(t *testing.T) {
	// The cut lands on a "-": it must not leave "--" or a trailing "-".
	n := Name(strings.Repeat("a", 51), "b")
	if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 || len(n) > MaxNameLength || strings.Contains(n, "--") {
		t.Errorf("%s (%d): %v", n, len(n), msgs)
	}
	if short := Name("x", "y"); short != "x-y" {
		t.Errorf("Name(x, y) = %s", short)
	}
}
