package selftest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/local"
)

// TestTheShippedRoleIsEnough runs the suite as the shipped ServiceAccount,
// under exactly conformance/config's RBAC: --dry-run's preflight finds
// every permission and a feature passes. With one verb taken from the
// role, --dry-run and a run both fail at preflight, naming it.
func TestTheShippedRoleIsEnough(t *testing.T) {
	if api == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	applyShipped(t, api.Client)
	sa := "system:serviceaccount:" + rbac.Name + ":" + rbac.Name
	cfg, err := api.AsUser(sa, "system:serviceaccounts", "system:serviceaccounts:"+rbac.Name, "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := writeKubeconfig(cfg, filepath.Join(t.TempDir(), "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, cfg, "create", "gpulab.io", "gpuclusters", true)
	// The autoscaling feature reads Karpenter's objects and never writes
	// them: the autoscaler adds and removes nodes, not the suite.
	waitAllowed(t, cfg, "list", "karpenter.sh", "nodepools", true)
	waitAllowed(t, cfg, "list", "karpenter.sh", "nodeclaims", true)
	waitAllowed(t, cfg, "update", "karpenter.sh", "nodepools", false)
	waitAllowed(t, cfg, "create", "karpenter.sh", "nodeclaims", false)
	waitAllowed(t, cfg, "delete", "karpenter.sh", "nodeclaims", false)
	// The preflight asks whether the policy confines this ServiceAccount:
	// wait until the API server has loaded it.
	waitConfined(t, cfg)

	r := runSuite(t, kc, "--dry-run")
	// The dry run also says what this run could not evidence: without
	// --disruptive, the operator's leader kill.
	if r.code != results.ExitPassed || !strings.Contains(r.out, "preflight: all") ||
		!regexp.MustCompile(`robust_controller +(not )?asked +(CANNOT, the run would be PARTIAL|cannot): the leader kill needs --disruptive`).MatchString(r.out) {
		t.Fatalf("--dry-run under the shipped role: exit %d, want 0 and the preflight's all-granted line:\n%s", r.code, r.out)
	}
	r = runSuite(t, kc, "--assess=^invalid GPUClusters")
	if a := r.assessment(t, "controller", "invalid GPUClusters"); r.code != results.ExitPassed || a.Status != results.StatusPassed {
		t.Fatalf("under the shipped role: exit %d, %s (%s), want exit 0 and passed", r.code, a.Status, a.Reason)
	}

	// One verb less: the run stops at preflight and says which.
	var cr rbacv1.ClusterRole
	if err := api.Client.Get(ctx, client.ObjectKey{Name: rbac.Name}, &cr); err != nil {
		t.Fatal(err)
	}
	full := cr.DeepCopy()
	t.Cleanup(func() {
		cr.Rules = full.Rules
		if err := api.Client.Update(context.Background(), &cr); err != nil {
			t.Errorf("restoring the role: %v", err)
		}
	})
	for i, rule := range cr.Rules {
		if slices.Equal(rule.APIGroups, []string{"gpulab.io"}) && slices.Equal(rule.Resources, []string{"gpuclusters"}) {
			cr.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == "create" })
		}
	}
	if err := api.Client.Update(ctx, &cr); err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, cfg, "create", "gpulab.io", "gpuclusters", false)
	const named = "create gpuclusters.gpulab.io"
	r = runSuite(t, kc, "--dry-run")
	if r.code != results.ExitFailed || !strings.Contains(r.out, named) || !strings.Contains(r.out, "lacks 1 of") {
		t.Errorf("--dry-run without %s: exit %d, want 1 naming it:\n%s", named, r.code, r.out)
	}
	r = runSuite(t, kc, "--assess=^invalid GPUClusters")
	if a := r.assessment(t, "setup", "setup"); r.code != results.ExitFailed || a.Status != results.StatusFailed || !strings.Contains(a.Reason, named) {
		t.Errorf("a run without %s: exit %d, setup %s (%s), want exit 1 and a failed setup naming it", named, r.code, a.Status, a.Reason)
	}
}

// shippedFiles are conformance/config's manifests, as its kustomization
// lists them.
var shippedFiles = []string{"namespace.yaml", "serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "admission-policy.yaml"}

// applyShipped creates conformance/config's objects (its kustomization
// lists plain files, so they are read as they are); objects already
// there (another test applied them) are left as they are.
func applyShipped(t *testing.T, c client.Client) {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range shippedFiles {
		data, err := os.ReadFile(filepath.Join(root, "conformance", "config", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			obj, err := decode([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := c.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating %s: %v", f, err)
			}
		}
	}
}

func decode(data []byte) (client.Object, error) {
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return nil, err
	}
	var obj client.Object
	switch meta.Kind {
	case "Namespace":
		obj = &corev1.Namespace{}
	case "ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "ClusterRole":
		obj = &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	case "ValidatingAdmissionPolicy":
		obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
	case "ValidatingAdmissionPolicyBinding":
		obj = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	default:
		return nil, fmt.Errorf("unexpected kind %q", meta.Kind)
	}
	return obj, yaml.Unmarshal(data, obj)
}

// waitAllowed polls until the user of cfg may (or may not) do verb on the
// resource: the API server's RBAC follows a role change within moments.
func waitAllowed(t *testing.T, cfg *rest.Config, verb, group, resource string, want bool) {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: local.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource}}}
		if err := c.Create(context.Background(), ssar); err != nil {
			t.Fatal(err)
		}
		if ssar.Status.Allowed == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("may %s %s.%s: still %t after 30s", verb, resource, group, !want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
