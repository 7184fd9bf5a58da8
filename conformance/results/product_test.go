package results

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestProductEvidence: PRODUCT.yaml lists every checklist item in its
// section; those the run tested carry the checklist's status and the junit
// cases that tested them, the rest are left to the submitter, never
// Implemented.
func TestProductEvidence(t *testing.T) {
	r := sample()
	r.Environment.KubernetesVersion = "v1.37.2"
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, ProductFile))
	if err != nil {
		t.Fatal(err)
	}
	var p Product
	if err := yaml.Unmarshal(data, &p); err != nil {
		t.Fatalf("PRODUCT.yaml does not parse: %v\n%s", err, data)
	}
	if p.Metadata["kubernetesVersion"] != "v1.37" {
		t.Errorf("kubernetesVersion %q, want v1.37", p.Metadata["kubernetesVersion"])
	}
	items := map[string]ProductItem{}
	n := 0
	for _, sec := range p.Spec {
		for _, it := range sec {
			items[it.ID] = it
			n++
		}
	}
	if n != 12 {
		t.Errorf("%d checklist items, want the checklist's 12", n)
	}
	gang := items["gang_scheduling"]
	if gang.Status != "Partially Implemented" || gang.Verification != "automated" ||
		!slices.Contains(gang.Evidence, "junit.xml#gang/fits: passed") {
		t.Errorf("gang_scheduling: %+v", gang)
	}
	if rc := items["robust_controller"]; rc.Status != "Not Implemented" {
		t.Errorf("robust_controller (a failed assessment): %+v", rc)
	}
	for _, id := range []string{"secure_accelerator_access", "dra_support", "ai_inference"} {
		if it := items[id]; it.Status != "" || it.Verification != "manual" || len(it.Evidence) != 0 {
			t.Errorf("%s, not tested: %+v, want no status, manual, no evidence", id, it)
		}
	}
	if !slices.ContainsFunc(p.Spec["schedulingOrchestration"], func(it ProductItem) bool { return it.ID == "gang_scheduling" }) {
		t.Error("gang_scheduling not under schedulingOrchestration")
	}
}
