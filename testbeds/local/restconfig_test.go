package local

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
)

// TestRESTConfigFollowsRecreatedCertificates: a testbed created again under
// the same name has a new CA at the same path, and a client built after
// that must trust the new one. client-go caches transports by file path,
// so a config that only names the files reuses the first CA.
func TestRESTConfigFollowsRecreatedCertificates(t *testing.T) {
	dir := t.TempDir()
	caPath, kubeconfig := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "kubeconfig.yaml")
	serve := func() string {
		t.Helper()
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		// The bundle's second certificate is the CA that signed the first.
		if err := os.WriteFile(caPath, certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		config := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + srv.URL +
			"\n    certificate-authority: " + caPath +
			"\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
		if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		return srv.URL
	}
	for i := range 2 {
		url := serve()
		cfg, err := restConfig(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		c, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("testbed %d: %v", i+1, err)
		}
		resp.Body.Close()
	}
}
