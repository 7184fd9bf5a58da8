package results

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// ProductFile is the AI-conformance evidence file a run writes beside its
// results, shaped like the CNCF checklist's PRODUCT.yaml.
const ProductFile = "PRODUCT.yaml"

// checklist is the CNCF Kubernetes AI conformance checklist's items by
// section, in its order; the suite evidences some of them (Requirements).
var checklist = []struct {
	section string
	items   []struct{ id, level string }
}{
	{"accelerators", []struct{ id, level string }{{"dra_support", "MUST"}, {"driver_runtime_management", "SHOULD"}, {"gpu_sharing", "SHOULD"}, {"virtualized_accelerator", "SHOULD"}}},
	{"networking", []struct{ id, level string }{{"ai_inference", "MUST"}}},
	{"schedulingOrchestration", []struct{ id, level string }{{"gang_scheduling", "MUST"}, {"cluster_autoscaling", "MUST"}, {"pod_autoscaling", "MUST"}}},
	{"observability", []struct{ id, level string }{{"accelerator_metrics", "MUST"}, {"ai_service_metrics", "MUST"}}},
	{"security", []struct{ id, level string }{{"secure_accelerator_access", "MUST"}}},
	{"operator", []struct{ id, level string }{{"robust_controller", "MUST"}}},
}

// ProductItem is one checklist requirement in PRODUCT.yaml.
type ProductItem struct {
	ID    string `json:"id"`
	Level string `json:"level"`
	// Status is the checklist's: Implemented, Partially Implemented, Not
	// Implemented, or empty where this run did not test it.
	Status string `json:"status"`
	// Verification says how the status was reached: "automated" (this
	// suite's assessments, each named in Evidence) or "manual" (left to
	// the submitter: the suite does not test it).
	Verification string `json:"verification"`
	// Evidence names the junit.xml cases that tested it:
	// junit.xml#<feature>/<assessment>: <status>.
	Evidence []string `json:"evidence"`
	Notes    string   `json:"notes"`
}

// Product is PRODUCT.yaml's content.
type Product struct {
	Metadata map[string]string        `json:"metadata"`
	Spec     map[string][]ProductItem `json:"spec"`
}

// ProductOf is a run's evidence file. Metadata the suite cannot know (the
// vendor, the product's URLs) is left for the submitter to fill in.
func ProductOf(r *Results) Product {
	e := r.Environment
	p := Product{
		Metadata: map[string]string{
			"kubernetesVersion": kubeMinor(e.KubernetesVersion),
			"platformName":      e.ClusterName,
			"platformVersion":   "",
			"vendorName":        "",
			"description": fmt.Sprintf("gpulab-conformance %s (%s) on %s, profile %s, workload %s, run %s: %s",
				orDash(e.SuiteVersion), orDash(e.SuiteCommit), orDash(e.ClusterName), e.Profile, e.WorkloadName(),
				r.EndTime.UTC().Format("2006-01-02T15:04:05Z"), r.RunVerdict()),
		},
		Spec: map[string][]ProductItem{},
	}
	evidence := map[Requirement]Evidence{}
	for _, ev := range KAREvidence(r.Features, r.Requested...) {
		evidence[ev.Requirement] = ev
	}
	for _, sec := range checklist {
		for _, item := range sec.items {
			pi := ProductItem{ID: item.id, Level: item.level, Verification: "manual", Evidence: []string{},
				Notes: "not tested by gpulab-conformance: evidence is the submitter's"}
			if ev, ok := evidence[Requirement(item.id)]; ok && ev.Status != StatusNotTested {
				pi.Verification, pi.Status = "automated", productStatus(ev.Status)
				for _, a := range ev.Assessments {
					pi.Evidence = append(pi.Evidence, "junit.xml#"+a)
				}
				pi.Notes = fmt.Sprintf("%s by gpulab-conformance (%s)", ev.Status, orDash(ev.KAR))
			} else if ok {
				pi.Notes = "not tested in this run"
				if ev.Requested {
					pi.Notes += ", though asked for: the run is PARTIAL"
				}
			}
			p.Spec[sec.section] = append(p.Spec[sec.section], pi)
		}
	}
	return p
}

func productStatus(s Status) string {
	switch s {
	case StatusPassed:
		return "Implemented"
	case StatusPartial:
		return "Partially Implemented"
	default:
		return "Not Implemented"
	}
}

// kubeMinor is v1.37 of v1.37.2 (the checklist is per minor release).
func kubeMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// ProductYAML renders ProductOf(r).
func (r *Results) ProductYAML() ([]byte, error) {
	out, err := yaml.Marshal(ProductOf(r))
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", ProductFile, err)
	}
	return append([]byte("# AI-conformance evidence from gpulab-conformance; fill in the empty metadata before submitting.\n"), out...), nil
}
