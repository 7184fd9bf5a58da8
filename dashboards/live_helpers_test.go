package dashboards_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	pollpkg "github.com/gpulab/gpulab/internal/poll"
)

// serveDCGMExporter serves the recorded DCGM exporter page as its /metrics
// and returns its address.
func serveDCGMExporter(t *testing.T) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("testdata", "dcgm-exporter.prom"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(page)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// addScrapeJob adds a job scraping addr, its series labelled cluster, to a
// copy of the shipped Prometheus config.
func addScrapeJob(t *testing.T, config, job, addr, cluster string) {
	t.Helper()
	var cfg map[string]any
	readYAML(t, config, &cfg)
	jobs, _ := cfg["scrape_configs"].([]any)
	cfg["scrape_configs"] = append(jobs, map[string]any{
		"job_name":       job,
		"static_configs": []any{map[string]any{"targets": []string{addr}, "labels": map[string]string{"cluster": cluster}}},
	})
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// poll calls cond until it holds or the timeout passes, then fails with
// cond's last detail.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := pollpkg.Until(t.Context(), timeout, cond); err != nil {
		t.Errorf("waiting for %s: %v", what, err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startProcess runs a binary with its output in dir/<name>.log and stops it
// by PID when the test ends (SIGTERM, then SIGKILL after 10 seconds).
func startProcess(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	// Its exit status is not checked: it is stopped by a signal.
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log (last 4 KiB):\n%s", name, tail(b, 4096))
			}
		}
	})
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
