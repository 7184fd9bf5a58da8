package bench

import (
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/scheme"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

func TestCheckIdentity(t *testing.T) {
	for _, ok := range append([]string{""}, Identities...) {
		if err := CheckIdentity(ok); err != nil {
			t.Errorf("CheckIdentity(%q): %v", ok, err)
		}
	}
	if err := CheckIdentity("root"); err == nil {
		t.Error(`CheckIdentity("root") passed`)
	}
}

// TestServiceAccountIdentity: on a real API server, the operator's
// kubeconfig authenticates as its shipped ServiceAccount, which its shipped
// RBAC lets read GPUClusters and not Secrets; its requests are classified
// by the suggested service-accounts FlowSchema, and by the shipped
// gpulab-operator one once operator/config/apf is applied.
func TestServiceAccountIdentity(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{})
	ctx := t.Context()
	for _, tc := range []struct{ identity, flowSchema string }{
		{IdentityServiceAccount, "service-accounts"},
		{IdentityServiceAccountAPF, "gpulab-operator"},
	} {
		t.Run(tc.identity, func(t *testing.T) {
			path, err := serviceAccountKubeconfig(ctx, env.Client, env.Config, tc.identity, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			review := &authenticationv1.SelfSubjectReview{}
			if err := c.Create(ctx, review); err != nil {
				t.Fatal(err)
			}
			if got, want := review.Status.UserInfo.Username, "system:serviceaccount:gpulab-system:gpulab-operator"; got != want {
				t.Errorf("the kubeconfig authenticates as %q, want %q", got, want)
			}
			if err := c.List(ctx, &gpulabv1alpha1.GPUClusterList{}); err != nil {
				t.Errorf("listing GPUClusters as the operator: %v", err)
			}
			if err := c.List(ctx, &corev1.SecretList{}); !apierrors.IsForbidden(err) {
				t.Errorf("listing Secrets as the operator: %v, want forbidden", err)
			}

			var fs flowcontrolv1.FlowSchema
			if err := env.Client.Get(ctx, types.NamespacedName{Name: tc.flowSchema}, &fs); err != nil {
				t.Fatal(err)
			}
			// The API server names the FlowSchema that classified a request
			// in every response.
			hc, err := rest.HTTPClientFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/apis/gpulab.io/v1alpha1/gpuclusters", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"); got != string(fs.UID) {
				t.Errorf("the operator's request was classified by FlowSchema UID %q, want %s's %s", got, tc.flowSchema, fs.UID)
			}
		})
	}
}
