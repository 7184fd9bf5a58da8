package measure

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestOnlyFiltersAtTheSource checks Only against Prometheus's own Go
// handler: the filtered page holds the named metric and not the others.
func TestOnlyFiltersAtTheSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{"wanted_bytes", "other_total"} {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: name})
		g.Set(42)
		reg.MustRegister(g)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	url, err := Only(srv.URL+"/metrics?x=1", "wanted_bytes")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ScrapeURL(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sum("wanted_bytes", nil); got != 42 {
		t.Errorf("wanted_bytes = %v, want 42", got)
	}
	if _, ok := s["other_total"]; ok {
		t.Errorf("the filtered page holds other_total too: %v", s)
	}
	if _, err := Only("http://[::1]:namedport/metrics", "x"); err == nil {
		t.Error("a malformed URL must be refused")
	}
}

const emptyVector = `{"status":"success","data":{"resultType":"vector","result":[]}}`

// TestPrometheusBearerToken: the token file's content (its newline
// dropped) goes in every request's Authorization header, read again each
// time so a rotated token is used; an error never carries it.
func TestPrometheusBearerToken(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer s3cret-2" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"status":"error","errorType":"unauthorized","error":"bad token"}`)
			return
		}
		fmt.Fprint(w, emptyVector)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := NewPrometheus(srv.URL, tokenFile, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.query(context.Background(), "up")
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the refused token: error %v, want the 401 and no token", err)
	}
	// The token is rotated in place, as a projected token is.
	if err := os.WriteFile(tokenFile, []byte("s3cret-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.query(context.Background(), "up"); err != nil {
		t.Errorf("the rotated token: %v", err)
	}
	if strings.Join(got, ",") != "Bearer s3cret-1,Bearer s3cret-2" {
		t.Errorf("Authorization headers %q", got)
	}
	// No token file: no header.
	got = nil
	plain, err := NewPrometheus(srv.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = plain.query(context.Background(), "up")
	if len(got) != 1 || got[0] != "" {
		t.Errorf("without a token file: Authorization %q, want none", got)
	}
	// The file gone mid-run: an error naming the file, not a bare request.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if _, err := p.query(context.Background(), "up"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a removed token file: %v, want ErrNotExist", err)
	}
}

func writeCA(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrometheusCAFile: a server whose certificate the system roots do
// not know is reached only with its CA given.
func TestPrometheusCAFile(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, emptyVector) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	plain, err := NewPrometheus(srv.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.query(context.Background(), "up"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	p, err := NewPrometheus(srv.URL, "", writeCA(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.query(context.Background(), "up"); err != nil {
		t.Errorf("with the CA: %v", err)
	}
}

func TestPrometheusFilesRejected(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("k")})
	for _, tc := range []struct {
		token, ca, want string
	}{
		{token: filepath.Join(dir, "missing"), want: "no such file"},
		{token: write("empty", " \n"), want: "is empty"},
		{ca: filepath.Join(dir, "missing.pem"), want: "no such file"},
		{ca: write("text.pem", "not a certificate"), want: "holds no PEM CERTIFICATE"},
		{ca: write("key.pem", string(key)), want: "holds no PEM CERTIFICATE"},
		{ca: write("bad.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}))), want: "certificate 1:"},
	} {
		if _, err := NewPrometheus("http://prometheus:9090", tc.token, tc.ca); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q, CA %q: %v, want an error containing %q", tc.token, tc.ca, err, tc.want)
		}
	}
	if _, err := LoadCAFile(filepath.Join(dir, "missing.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing CA file: %v, want ErrNotExist wrapped", err)
	}
}
