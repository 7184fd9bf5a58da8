package cli

import (
	"context"
	"crypto/tls"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestDaemonSetServesMetricsSecurely: the shipped DaemonSet's arguments are
// valid agent flags that put /metrics behind authentication on its metrics
// port, and its probes on the plain probe port.
func TestDaemonSetServesMetricsSecurely(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	t.Setenv("NODE_NAME", "gpu-node") // from the downward API
	var f runFlags
	fs := flag.NewFlagSet("gpulab-agent", flag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatal(err)
	}
	if err := f.validate(fs); err != nil {
		t.Fatalf("the DaemonSet's arguments %v: %v", c.Args, err)
	}
	if !f.metricsSecure {
		t.Errorf("the DaemonSet serves /metrics without authentication: %v", c.Args)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	portOf := func(addr string) int32 {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		return int32(n)
	}
	if got := portOf(f.metricsAddr); got != ports["metrics"] {
		t.Errorf("--metrics-bind-address=%s, container port metrics %d", f.metricsAddr, ports["metrics"])
	}
	if got := portOf(f.probeAddr); got != ports["probes"] || got == ports["metrics"] {
		t.Errorf("--health-probe-bind-address=%s, container ports %v", f.probeAddr, ports)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "probes" || p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v: want plain HTTP on port probes", name, p)
		}
	}
}

// TestSecureMetrics: with --metrics-secure, /metrics answers only callers
// whose token the API server accepts and who may get /metrics; the probes
// answer anyone, on their own port only.
func TestSecureMetrics(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{
		CRDDirs: []string{filepath.Join("..", "..", "..", "operator", "config", "crd", "bases", "gpulab.io_gpuinventories.yaml")},
	})
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "monitoring"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	scraper, stranger := token("prometheus"), token("stranger")
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait for RBAC before the first scrape: the agent caches a denial.
	deadline := time.Now().Add(30 * time.Second)
	for {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  "system:serviceaccount:" + ns + ":prometheus",
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}, metav1.CreateOptions{})
		if err == nil && sar.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RBAC for the scraper: %v %+v", err, sar)
		}
		time.Sleep(50 * time.Millisecond)
	}

	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpulab_test_gauge"})
	g.Set(1)
	reg.MustRegister(g)
	ready := make(chan struct{})
	f := &runFlags{metricsAddr: freeAddr(t), metricsSecure: true, probeAddr: freeAddr(t)}
	stop, err := serveMetrics(f, env.Config, reg, ready, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The agent's certificate is self-signed.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	get := func(url, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := insecure.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	metrics := "https://" + f.metricsAddr + "/metrics"
	for _, tc := range []struct {
		who, token string
		codes      []int
	}{
		{"no token", "", []int{http.StatusUnauthorized}},
		// controller-runtime's filter answers 500 when the TokenReview
		// says why it rejects the token.
		{"a token the API server did not issue", "not-a-token", []int{http.StatusUnauthorized, http.StatusInternalServerError}},
		{"a service account without the right", stranger, []int{http.StatusForbidden}},
		{"the scraper", scraper, []int{http.StatusOK}},
	} {
		code, body := get(metrics, tc.token)
		if !slices.Contains(tc.codes, code) {
			t.Errorf("%s: %d %q, want one of %v", tc.who, code, body, tc.codes)
		}
		if leaked := strings.Contains(body, "gpulab_test_gauge"); leaked != (code == http.StatusOK) {
			t.Errorf("%s: metrics in the answer = %v", tc.who, leaked)
		}
	}
	if resp, err := insecure.Get("http://" + f.metricsAddr + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "gpulab_test_gauge") {
			t.Errorf("/metrics over plain HTTP: %d %q", resp.StatusCode, body)
		}
	}

	probes := "http://" + f.probeAddr
	if code, _ := get(probes+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, _ := get(probes+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the first publish: %d", code)
	}
	close(ready)
	if code, _ := get(probes+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz after the first publish: %d", code)
	}
	if code, body := get(probes+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("the probe port serves /metrics: %d %q", code, body)
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}
