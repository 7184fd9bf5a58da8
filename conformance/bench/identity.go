package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/internal/manifest"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/local"
)

// Who the operator a Bed runs is to the API server (BedOptions.Identity).
const (
	// IdentityAdmin is the testbed's admin (the default): system:masters,
	// which API Priority and Fairness exempts from every limit.
	IdentityAdmin = "admin"
	// IdentityServiceAccount is the operator's shipped ServiceAccount with
	// its shipped RBAC (operator/config/rbac), through a token: what runs
	// in a cluster, its requests in APF's shared workload-low level.
	IdentityServiceAccount = "serviceaccount"
	// IdentityServiceAccountAPF adds the shipped priority level and
	// FlowSchema (operator/config/apf, the chart's operator.apiPriority).
	IdentityServiceAccountAPF = "serviceaccount-apf"
)

// Identities are the values BedOptions.Identity takes.
var Identities = []string{IdentityAdmin, IdentityServiceAccount, IdentityServiceAccountAPF}

// The operator's ServiceAccount, as operator/config/rbac names it.
const (
	operatorNamespace      = "gpulab-system"
	operatorServiceAccount = "gpulab-operator"
)

// CheckIdentity fails unless identity is one of Identities ("" is
// IdentityAdmin).
func CheckIdentity(identity string) error {
	for _, i := range append([]string{""}, Identities...) {
		if identity == i {
			return nil
		}
	}
	return fmt.Errorf("unknown operator identity %q: want one of %v", identity, Identities)
}

// operatorKubeconfig is the kubeconfig the operator runs with on tb as
// identity: the testbed's own for IdentityAdmin; otherwise the shipped
// manifests applied and a kubeconfig with a token of the operator's
// ServiceAccount, written into dir.
func operatorKubeconfig(ctx context.Context, tb *local.Testbed, identity, dir string) (string, error) {
	if identity == "" || identity == IdentityAdmin {
		return tb.Kubeconfig(), nil
	}
	c, err := tb.Client()
	if err != nil {
		return "", err
	}
	cfg, err := tb.RESTConfig()
	if err != nil {
		return "", err
	}
	return serviceAccountKubeconfig(ctx, c, cfg, identity, dir)
}

// serviceAccountKubeconfig applies the shipped manifests identity needs
// with the admin client c and writes a kubeconfig for the API server of
// cfg with a token of the operator's ServiceAccount.
func serviceAccountKubeconfig(ctx context.Context, c client.Client, cfg *rest.Config, identity, dir string) (string, error) {
	manifests := []string{"operator/config/rbac"}
	if identity == IdentityServiceAccountAPF {
		manifests = append(manifests, "operator/config/apf")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("namespace %s: %w", operatorNamespace, err)
	}
	for _, m := range manifests {
		if err := applyKustomization(ctx, c, m); err != nil {
			return "", err
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: operatorServiceAccount, Namespace: operatorNamespace}}
	// A day outlasts any benchmark; the token dies with the testbed.
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("a token for ServiceAccount %s/%s: %w", operatorNamespace, operatorServiceAccount, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testbed"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[operatorServiceAccount] = &clientcmdapi.AuthInfo{Token: req.Status.Token}
	kc.Contexts["testbed"] = &clientcmdapi.Context{Cluster: "testbed", AuthInfo: operatorServiceAccount}
	kc.CurrentContext = "testbed"
	path := filepath.Join(dir, "operator-"+identity+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("writing the operator's kubeconfig: %w", err)
	}
	return path, nil
}

// applyKustomization renders one of the repository's kustomize
// directories with kubectl and applies its objects server-side.
func applyKustomization(ctx context.Context, c client.Client, dir string) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	bins, err := binaries.Lookup(ctx, binaries.Options{})
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bins.Kubectl, "kustomize", filepath.Join(root, dir)).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, exit.Stderr)
		}
		return fmt.Errorf("kubectl kustomize %s: %w", dir, err)
	}
	objs, err := manifest.Decode(out)
	if err != nil {
		return fmt.Errorf("decoding %s: %w", dir, err)
	}
	for _, obj := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("gpulab-bench"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s from %s: %w", obj.GetKind(), obj.GetName(), dir, err)
		}
	}
	return nil
}
