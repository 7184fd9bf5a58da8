package profile

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/testbed"
)

func kubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeAPIServer serves discovery for CRDs, allows every access review,
// and answers every CRD read with crdStatus.
func fakeAPIServer(t *testing.T, crdStatus int) string {
	t.Helper()
	reply := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/version", reply(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	mux.HandleFunc("/api", reply(`{"kind":"APIVersions","versions":["v1"]}`))
	mux.HandleFunc("/apis", reply(`{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"apiextensions.k8s.io",
		"versions":[{"groupVersion":"apiextensions.k8s.io/v1","version":"v1"}],"preferredVersion":{"groupVersion":"apiextensions.k8s.io/v1","version":"v1"}},
		{"name":"authorization.k8s.io","versions":[{"groupVersion":"authorization.k8s.io/v1","version":"v1"}],"preferredVersion":{"groupVersion":"authorization.k8s.io/v1","version":"v1"}},
		{"name":"authentication.k8s.io","versions":[{"groupVersion":"authentication.k8s.io/v1","version":"v1"}],"preferredVersion":{"groupVersion":"authentication.k8s.io/v1","version":"v1"}}]}`))
	// The confinement check asks who this is: a person, not the runner.
	mux.HandleFunc("/apis/authentication.k8s.io/v1", reply(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"authentication.k8s.io/v1",
		"resources":[{"name":"selfsubjectreviews","singularName":"selfsubjectreview","namespaced":false,"kind":"SelfSubjectReview","verbs":["create"]}]}`))
	mux.HandleFunc("/apis/authentication.k8s.io/v1/selfsubjectreviews", reply(`{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","status":{"userInfo":{"username":"admin"}}}`))
	// The preflight's SelfSubjectAccessReviews: this user may do anything.
	mux.HandleFunc("/apis/authorization.k8s.io/v1", reply(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"authorization.k8s.io/v1",
		"resources":[{"name":"selfsubjectaccessreviews","singularName":"selfsubjectaccessreview","namespaced":false,"kind":"SelfSubjectAccessReview","verbs":["create"]}]}`))
	mux.HandleFunc("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", reply(`{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","status":{"allowed":true}}`))
	mux.HandleFunc("/apis/apiextensions.k8s.io/v1", reply(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"apiextensions.k8s.io/v1",
		"resources":[{"name":"customresourcedefinitions","singularName":"customresourcedefinition","namespaced":false,"kind":"CustomResourceDefinition","verbs":["get","list"]}]}`))
	mux.HandleFunc("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/", func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/")
		reason := map[int]string{http.StatusNotFound: "NotFound", http.StatusForbidden: "Forbidden"}[crdStatus]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(crdStatus)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d,"message":"customresourcedefinitions %s: %s",
			"details":{"name":%q,"group":"apiextensions.k8s.io","kind":"customresourcedefinitions"}}`, reason, crdStatus, name, strings.ToLower(reason), name)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestClusterProfileSaysWhatIsWrong: a kubeconfig that cannot be read, an
// API server that cannot be reached and CRDs that cannot be read are each
// reported as such; only CRDs the server says are absent are "missing".
func TestClusterProfileSaysWhatIsWrong(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	for name, tc := range map[string]struct {
		kubeconfig string
		want       string
		notWant    string
	}{
		"unreadable":    {kubeconfig: filepath.Join(t.TempDir(), "no-such-kubeconfig"), want: "reading --kubeconfig"},
		"unreachable":   {kubeconfig: kubeconfig(t, closed), want: "cannot talk to the API server at " + closed},
		"CRDs missing":  {kubeconfig: kubeconfig(t, fakeAPIServer(t, http.StatusNotFound)), want: "the cluster lacks [gpuclusters.gpulab.io"},
		"CRDs readable": {kubeconfig: kubeconfig(t, fakeAPIServer(t, http.StatusForbidden)), want: "checking CRD gpuclusters.gpulab.io", notWant: "lacks"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Setup(context.Background(), Options{Profile: "cluster", Kubeconfig: tc.kubeconfig})
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.notWant != "" && strings.Contains(err.Error(), tc.notWant)) {
				t.Fatalf("Setup = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestLocalVolcanoVersion: DRA gangs run the Volcano rebuilt on the fixed
// Kubernetes libraries unless a version was chosen; everything else leaves
// the choice to the testbed.
func TestLocalVolcanoVersion(t *testing.T) {
	for _, tc := range []struct {
		dra  bool
		env  string
		want string
	}{
		{dra: true, want: binaries.DefaultDRAVolcanoVersion},
		{dra: true, env: "v1.14.1"},
		{dra: false},
		{dra: false, env: "v1.10.0"},
	} {
		t.Setenv(binaries.VolcanoVersionEnv, tc.env)
		if got := localVolcanoVersion(Options{DRAGangs: tc.dra}); got != tc.want {
			t.Errorf("DRAGangs %v, $%s=%q: %q, want %q", tc.dra, binaries.VolcanoVersionEnv, tc.env, got, tc.want)
		}
	}
}

// TestExistingClusterHasNoLocalExtras: the cluster profile's testbed is an
// existing cluster; Teardown leaves it alone, and what only the local
// testbed knows (its processes' ports) is empty.
func TestExistingClusterHasNoLocalExtras(t *testing.T) {
	ctx := context.Background()
	env := &Environment{Profile: "cluster", Testbed: testbed.Existing{ClusterName: "prod"}}
	if url := env.AgentMetricsURL(ctx); url != "" {
		t.Errorf("AgentMetricsURL = %q, want none", url)
	}
	if url, err := env.OperatorMetricsURL(ctx, "gpucluster"); url != "" || err != nil {
		t.Errorf("OperatorMetricsURL = %q, %v, want none", url, err)
	}
	if err := env.Teardown(ctx); err != nil {
		t.Errorf("Teardown: %v", err)
	}
}
