package incluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/testbeds/local"
)

// After a SIGTERM the suite cancels its waits, tears down the assessment
// in flight, waits for the run's pods and stores its results: the pod's
// grace period must cover all of it, and its requests must be set so that
// it is neither unschedulable nor the first evicted.
func TestRunnerPodStopsCleanly(t *testing.T) {
	for _, pods := range []int{0, 300, 6000} {
		grace := incluster.TerminationGrace(pods)
		if need := cleanup.PodTimeout(pods) + incluster.StoreTimeout + 3*time.Minute; grace < need {
			t.Errorf("TerminationGrace(%d) = %s, less than the cleanup, the in-flight teardown and storing (%s)", pods, grace, need)
		}
	}
	spec := incluster.Job(incluster.Options{Image: "i", RunID: "r1"}).Spec.Template.Spec
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second != incluster.TerminationGrace(0) {
		t.Errorf("terminationGracePeriodSeconds %v, want %s", g, incluster.TerminationGrace(0))
	}
	long := incluster.Job(incluster.Options{Image: "i", RunID: "r1", TerminationGrace: time.Hour}).Spec.Template.Spec
	if *long.TerminationGracePeriodSeconds != 3600 {
		t.Errorf("terminationGracePeriodSeconds %d, want the 3600 asked", *long.TerminationGracePeriodSeconds)
	}
	res := spec.Containers[0].Resources
	if res.Requests.Cpu().IsZero() || res.Requests.Memory().IsZero() || res.Limits.Memory().Cmp(*res.Requests.Memory()) <= 0 {
		t.Errorf("resources %+v: want cpu and memory requests, and a memory limit above the request", res)
	}
	if !res.Limits.Cpu().IsZero() {
		t.Errorf("a CPU limit %s would throttle the suite's measurements", res.Limits.Cpu())
	}
}

// The files the run reads from the submitter's disk are mounted, read-only,
// where the rewritten flags point.
func TestJobMountsCarriedFiles(t *testing.T) {
	job := incluster.Job(incluster.Options{Image: "i", RunID: "r1", Files: incluster.Files{
		PrometheusToken: []byte("t"), PrometheusCA: []byte("ca"),
		Baseline: map[string][]byte{"000/results.json": []byte("{}"), "001/results.json": []byte("{}")},
	}})
	spec := job.Spec.Template.Spec
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range spec.Containers[0].VolumeMounts {
		mounts[m.Name] = m
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	prom, base := vols["prometheus"], vols["baseline"]
	if prom.Secret == nil || prom.Secret.SecretName != "gpulab-conformance-files-r1" || len(prom.Secret.Items) != 2 {
		t.Fatalf("prometheus volume %+v: want the run's Secret, token and CA", prom)
	}
	for _, item := range prom.Secret.Items {
		if got := mounts["prometheus"].MountPath + "/" + item.Path; got != incluster.PrometheusTokenPath && got != incluster.PrometheusCAPath {
			t.Errorf("Secret key %s mounted at %s, where no flag points", item.Key, got)
		}
	}
	if base.ConfigMap == nil || base.ConfigMap.Name != "gpulab-conformance-baseline-r1" || mounts["baseline"].MountPath != incluster.BaselineDir {
		t.Fatalf("baseline volume %+v at %+v", base, mounts["baseline"])
	}
	var paths []string
	for _, item := range base.ConfigMap.Items {
		if strings.Contains(item.Key, "/") {
			t.Errorf("ConfigMap key %q holds a slash", item.Key)
		}
		paths = append(paths, item.Path)
	}
	if want := []string{"000/results.json", "001/results.json"}; !slices.Equal(paths, want) {
		t.Errorf("baseline mounted as %v, want %v", paths, want)
	}
	for _, name := range []string{"prometheus", "baseline"} {
		if !mounts[name].ReadOnly {
			t.Errorf("%s is mounted writable", name)
		}
	}
	// Without files, no volumes beyond the results and /tmp.
	if n := len(incluster.Job(incluster.Options{Image: "i", RunID: "r1"}).Spec.Template.Spec.Volumes); n != 2 {
		t.Errorf("%d volumes without files, want 2", n)
	}
}

// RunObjects are what Cleanup deletes for a run: the Job, every results
// part the Role may name, the Role and binding, and the carried files.
func TestRunObjectsCoverWhatSubmitCreates(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(local.Scheme).Build()
	ctx := context.Background()
	o := incluster.Options{Namespace: "runner", Image: "i", RunID: "r1", Files: incluster.Files{PrometheusToken: []byte("t"),
		Baseline: map[string][]byte{"results.json": []byte("{}")}}}
	if _, err := incluster.Submit(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, obj := range incluster.RunObjects("runner", "r1") {
		keys[strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")+"/"+obj.GetName()] = true
	}
	var cms corev1.ConfigMapList
	var secrets corev1.SecretList
	var roles rbacv1.RoleList
	var bindings rbacv1.RoleBindingList
	if err := c.List(ctx, &cms); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &secrets); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &roles); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &bindings); err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, cm := range cms.Items {
		made = append(made, "ConfigMap/"+cm.Name)
	}
	for _, s := range secrets.Items {
		made = append(made, "Secret/"+s.Name)
	}
	for _, r := range roles.Items {
		made = append(made, "Role/"+r.Name)
		if got := r.Rules[0].ResourceNames; len(got) != incluster.MaxParts || !slices.Equal(got, incluster.PartNames(incluster.ConfigMapName("r1"))) {
			t.Errorf("the Role names %v, want the run's %d parts", got, incluster.MaxParts)
		}
		if verbs := r.Rules[0].Verbs; slices.Contains(verbs, "create") || slices.Contains(verbs, "*") {
			t.Errorf("the Role grants %v: create cannot be limited to names", verbs)
		}
	}
	for _, b := range bindings.Items {
		made = append(made, "RoleBinding/"+b.Name)
	}
	if len(made) != incluster.MaxParts+4 {
		t.Errorf("Submit made %v: want %d results parts, the baseline, the Secret, the Role and its binding", made, incluster.MaxParts)
	}
	for _, m := range made {
		if !keys[m] {
			t.Errorf("Submit made %s, which RunObjects (what Cleanup deletes) lacks", m)
		}
	}
}

// The runner is a guest: not in Kubernetes' own namespaces, nor beside
// gpulab's operator, unless told.
func TestSubmitRefusesSystemNamespaces(t *testing.T) {
	op := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "gpulab-system", Name: "gpulab-operator",
		Labels: map[string]string{"app.kubernetes.io/name": "gpulab-operator"}}}
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", Labels: map[string]string{"app.kubernetes.io/name": "web"}}}
	ctx := context.Background()
	for _, tc := range []struct {
		ns    string
		allow bool
		want  string // "" accepted
	}{
		{"kube-system", false, "--runner-namespace=kube-system is a Kubernetes system namespace"},
		{"kube-public", false, "system namespace"},
		{"kube-node-lease", false, "system namespace"},
		{"gpulab-system", false, "holds gpulab's operator (Deployment gpulab-operator)"},
		{"apps", false, ""},
		{"gpulab-conformance", false, ""},
		{"kube-system", true, ""},
		{"gpulab-system", true, ""},
	} {
		c := fake.NewClientBuilder().WithScheme(local.Scheme).WithObjects(op.DeepCopy(), other.DeepCopy()).Build()
		_, err := incluster.Submit(ctx, c, incluster.Options{Namespace: tc.ns, AllowSystemNamespace: tc.allow, Image: "i", RunID: "r1"})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s (allow %v): %v, want it accepted", tc.ns, tc.allow, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--runner-namespace-allow-system")):
			t.Errorf("%s: %v, want a refusal with %q naming --runner-namespace-allow-system", tc.ns, err, tc.want)
		}
	}
}
