package v1alpha1_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	v1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
)

// The admission benchmarks price a create at the API server: what its CRD's
// schema and CEL rules cost per object (BenchmarkAdmission, the API
// server's own validators in this process), and what a burst of creates
// costs end to end on a real API server with no controller running
// (BenchmarkCreateBurst). Each compares a GPUCluster with KubeRay's
// RayCluster of the same gang (a head and 8 workers of 8 GPUs, the latency
// feature's shape), and with the same GPUCluster CRD stripped of its CEL
// rules, so the rules' share is a number.

// admissionCase is one kind of object the API server validates.
type admissionCase struct {
	name string
	crd  *apiextensionsv1.CustomResourceDefinition
	obj  func(name string) *unstructured.Unstructured
}

func BenchmarkAdmission(b *testing.B) {
	for _, c := range admissionCases(b) {
		s := crdSchema(b, c.crd)
		obj := c.obj("bench").Object
		b.Run(c.name+"/schema", func(b *testing.B) {
			v, _, err := validation.NewSchemaValidator(s)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if r := v.Validate(obj); !r.IsValid() {
					b.Fatalf("invalid %s: %v", c.name, r.Errors)
				}
			}
		})
		b.Run(c.name+"/cel", func(b *testing.B) {
			st, err := structuralschema.NewStructural(s)
			if err != nil {
				b.Fatal(err)
			}
			v := cel.NewValidator(st, true, celconfig.PerCallLimit)
			var cost int64
			for b.Loop() {
				if v == nil { // no rules at all
					continue
				}
				errs, left := v.Validate(context.Background(), field.NewPath(""), st, obj, nil, celconfig.RuntimeCELCostBudget)
				if len(errs) > 0 {
					b.Fatalf("invalid %s: %v", c.name, errs)
				}
				cost = celconfig.RuntimeCELCostBudget - left
			}
			// The cost units the API server charges against its budget of
			// 10,000,000 per object.
			b.ReportMetric(float64(cost), "cel-cost/op")
		})
	}
}

// burstSize is how many objects BenchmarkCreateBurst creates at once: the
// scale at which the create calls were seen to differ.
const burstSize = 300

func BenchmarkCreateBurst(b *testing.B) {
	if env == nil {
		b.Skip("needs a real kube-apiserver; skipped with -short")
	}
	cases := admissionCases(b)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, c := range cases {
		if c.name != "GPUCluster" { // installed with the environment
			crds = append(crds, c.crd)
		}
	}
	if _, err := crenvtest.InstallCRDs(env.Config, crenvtest.CRDInstallOptions{CRDs: crds}); err != nil {
		b.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // no client-side limit: every call is made at once
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			gvr := schema.GroupVersionResource{Group: c.crd.Spec.Group, Version: c.crd.Spec.Versions[0].Name, Resource: c.crd.Spec.Names.Plural}
			var calls []time.Duration
			var all time.Duration
			round := 0
			before := serverCreateTime(b, cfg, c.crd.Spec.Names.Plural)
			for b.Loop() {
				ns := fmt.Sprintf("burst-%d", time.Now().UnixNano())
				if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
					b.Fatal(err)
				}
				took, total, err := createBurst(dyn.Resource(gvr).Namespace(ns), c.obj)
				if err != nil {
					b.Fatal(err)
				}
				calls, all = append(calls, took...), all+total
				round++
			}
			slices.Sort(calls)
			at := func(q float64) float64 { return calls[int(q*float64(len(calls)-1))].Seconds() * 1000 }
			b.ReportMetric(at(0.5), "call-p50-ms")
			b.ReportMetric(at(0.99), "call-p99-ms")
			b.ReportMetric(all.Seconds()/float64(round), "all-returned-s")
			after := serverCreateTime(b, cfg, c.crd.Spec.Names.Plural)
			b.ReportMetric((after.sum-before.sum)/(after.count-before.count)*1000, "server-mean-ms")
		})
	}
}

// requestTime is the API server's apiserver_request_duration_seconds
// histogram for one resource's creates: what the server itself measured,
// from the request's arrival to its response.
type requestTime struct{ sum, count float64 }

func serverCreateTime(b *testing.B, cfg *rest.Config, resource string) requestTime {
	b.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	var t requestTime
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["verb"] == "POST" && labels["resource"] == resource {
			t.sum += m.GetHistogram().GetSampleSum()
			t.count += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return t
}

// createBurst creates burstSize objects at once and returns each call's
// time and the time until the last returned.
func createBurst(ri dynamic.ResourceInterface, obj func(string) *unstructured.Unstructured) ([]time.Duration, time.Duration, error) {
	took := make([]time.Duration, burstSize)
	errs := make([]error, burstSize)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range burstSize {
		o := obj(fmt.Sprintf("gang-%d", i))
		wg.Go(func() {
			<-start
			t0 := time.Now()
			_, errs[i] = ri.Create(context.Background(), o, metav1.CreateOptions{})
			took[i] = time.Since(t0)
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	total := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return nil, 0, err
		}
	}
	return took, total, nil
}

// admissionCases are a GPUCluster, the same under a CRD with no CEL rules,
// and KubeRay's RayCluster when the testbed's KubeRay source is in the
// cache.
func admissionCases(b *testing.B) []admissionCase {
	b.Helper()
	root, err := repo.Root()
	if err != nil {
		b.Fatal(err)
	}
	gc := readCRD(b, filepath.Join(root, "operator", "config", "crd", "bases", "gpulab.io_gpuclusters.yaml"))
	noCEL := gc.DeepCopy()
	noCEL.Spec.Group = "nocel." + gc.Spec.Group
	noCEL.Name = gc.Spec.Names.Plural + "." + noCEL.Spec.Group
	for i := range noCEL.Spec.Versions {
		dropRules(noCEL.Spec.Versions[i].Schema.OpenAPIV3Schema)
	}
	cases := []admissionCase{
		{name: "GPUCluster", crd: gc, obj: func(n string) *unstructured.Unstructured { return benchCluster(b, n, gc.Spec.Group) }},
		{name: "GPUCluster-without-CEL", crd: noCEL, obj: func(n string) *unstructured.Unstructured { return benchCluster(b, n, noCEL.Spec.Group) }},
	}
	set, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		b.Logf("no RayCluster case: %v", err)
		return cases
	}
	rc := readCRD(b, filepath.Join(set.KubeRayModuleDir, "config", "crd", "bases", "ray.io_rayclusters.yaml"))
	return append(cases, admissionCase{name: "RayCluster-" + set.KubeRayVersion, crd: rc, obj: benchRayCluster})
}

func readCRD(b *testing.B, path string) *apiextensionsv1.CustomResourceDefinition {
	b.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	return crd
}

// crdSchema is the first version's schema in the API server's internal form.
func crdSchema(b *testing.B, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsinternal.JSONSchemaProps {
	b.Helper()
	out := &apiextensionsinternal.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, out, nil); err != nil {
		b.Fatal(err)
	}
	return out
}

// dropRules removes every x-kubernetes-validations rule under s.
func dropRules(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.XValidations = nil
	for k, p := range s.Properties {
		dropRules(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		dropRules(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		dropRules(s.AdditionalProperties.Schema)
	}
}

// benchTemplate is the latency feature's pod: one container with CPU and
// memory requests, and GPUs when asked.
func benchTemplate(container string, gpus int64) corev1.PodTemplateSpec {
	ctr := corev1.Container{Name: container, Image: "registry.example/gpulab/pause:v1", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		ctr.Resources.Requests["nvidia.com/gpu"] = q
		ctr.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"gpulab.io/run": "bench"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{ctr}},
	}
}

func benchCluster(b *testing.B, name, group string) *unstructured.Unstructured {
	gc := &v1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	gc.Spec.Head.Template = benchTemplate("head", 0)
	gc.Spec.WorkerGroups = []v1.WorkerGroupSpec{{Name: "workers", Replicas: 8, GPUs: &v1.GPURequest{PerPod: new(int32(8))}, Template: benchTemplate("worker", 0)}}
	gc.Spec.Scheduling.Queue = "bench"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gc)
	if err != nil {
		b.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(group + "/" + v1.GroupVersion.Version)
	u.SetKind("GPUCluster")
	return u
}

func benchRayCluster(name string) *unstructured.Unstructured {
	tmpl := func(t corev1.PodTemplateSpec) map[string]any {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&t)
		if err != nil {
			panic(err) // a PodTemplateSpec always converts
		}
		return m
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1",
		"kind":       "RayCluster",
		"spec": map[string]any{
			"headGroupSpec": map[string]any{"rayStartParams": map[string]any{}, "template": tmpl(benchTemplate("ray-head", 0))},
			"workerGroupSpecs": []any{map[string]any{
				"groupName": "workers", "replicas": int64(8), "minReplicas": int64(8), "maxReplicas": int64(8),
				"rayStartParams": map[string]any{}, "template": tmpl(benchTemplate("ray-worker", 8)),
			}},
		},
	}}
	u.SetName(name)
	u.SetLabels(map[string]string{"volcano.sh/queue-name": "bench"})
	return u
}
