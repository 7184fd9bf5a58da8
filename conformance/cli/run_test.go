package cli

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/testbeds/kind"
)

func TestParseRunDefaults(t *testing.T) {
	o, err := ParseRun(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Profile != "local" || !o.MaxGPUs.All || o.Scale != 100 || o.Image != DefaultImage || o.Timeout != time.Hour {
		t.Errorf("defaults %+v", o)
	}
	if strings.Join(o.TestArgs, " ") != "-test.timeout=1h15m0s" {
		t.Errorf("test args %q, want only the backstop, --timeout plus %s", o.TestArgs, BackstopGrace)
	}
	if o.RunID == "" {
		t.Error("no run id")
	}
	c, err := ParseRun([]string{"--profile=cluster"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxGPUs.All || c.MaxGPUs.GPUs != footprint.DefaultClusterBudget || c.ClientQPS != 50 {
		t.Errorf("cluster budget %+v (want %d), client QPS %d (want 50)", c.MaxGPUs, footprint.DefaultClusterBudget, c.ClientQPS)
	}
	// kind pulls nothing: its pods run the image the testbed loads,
	// unless one is given.
	k, err := ParseRun([]string{"--profile=kind", "--image=mine:1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if k.Image != "mine:1" || k.SubmitImage != kind.WorkloadImage {
		t.Errorf("kind images %q and %q, want mine:1 and %q", k.Image, k.SubmitImage, kind.WorkloadImage)
	}
}

func TestParseRunFlags(t *testing.T) {
	o, err := ParseRun([]string{"--profile=cluster", "--context=prod", "--max-gpus=all", "--node-selector=pool=a,gpulab.io/x=y",
		"--namespace=team", "--queue=q1", "--verbose", "-test.run=TestGang", "-test.timeout", "5m", "-test.v"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.MaxGPUs.All || o.Context != "prod" || o.NodeSelector["pool"] != "a" || o.NodeSelector["gpulab.io/x"] != "y" || o.Namespace != "team" || o.Queue != "q1" {
		t.Errorf("parsed %+v", o)
	}
	// go test's own flags pass through; a given -test.timeout wins.
	if got := strings.Join(o.TestArgs, " "); got != "-test.run=TestGang -test.timeout 5m -test.v -test.v" {
		t.Errorf("test args %q", got)
	}
	n, err := ParseRun([]string{"--profile=kind", "--max-gpus=24"}, io.Discard)
	if err != nil || n.MaxGPUs.GPUs != 24 || n.MaxGPUs.All || !n.MaxGPUs.Allows(24) || n.MaxGPUs.Allows(25) {
		t.Errorf("--max-gpus=24: %+v, %v", n, err)
	}
}

func TestParseRunRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--profile=aws"}, `--profile="aws"`},
		{[]string{"--max-gpus=0"}, "--max-gpus: want a positive number of GPUs or all"},
		{[]string{"--max-gpus=some"}, "--max-gpus"},
		{[]string{"--scale=0"}, "--scale must be at least 1"},
		{[]string{"--wait-window=0"}, "--wait-window must be positive"},
		{[]string{"--timeout=-1m"}, "--timeout must be positive"},
		{[]string{"--kubeconfig=/x"}, "--kubeconfig is for --profile=cluster"},
		{[]string{"--real-gpus"}, "--real-gpus needs real GPUs"},
		{[]string{"--profile=kind", "--dry-run"}, "run --profile=cluster --kubeconfig=<the kind cluster's kubeconfig> --dry-run"},
		{[]string{"--profile=cluster", "--fleet=dgx-h100=1"}, "--fleet sizes the local testbed"},
		{[]string{"--fleet=dgx-z9=1"}, "--fleet:"},
		{[]string{"--namespace=Team_A"}, `--namespace="Team_A"`},
		{[]string{"--queue=a/b"}, `--queue="a/b"`},
		{[]string{"--node-selector=pool"}, `"pool" is not key=value`},
		{[]string{"--node-selector=a b=c"}, `label key "a b"`},
		{[]string{"--cluster-name=a b"}, `--cluster-name="a b"`},
		{[]string{"--prometheus-url=localhost:9090"}, "want an http:// or https:// URL"},
		{[]string{"--push-baseline=conformance/baselines/local"}, "--push-baseline needs --pushgateway-url"},
		{[]string{"--pushgateway-url=http://127.0.0.1:9091", "--push-baseline=/no/such/runs"}, "--push-baseline: stat /no/such/runs"},
		{[]string{"--feature=("}, "--feature:"},
		{[]string{"--image="}, "--image must not be empty"},
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
	} {
		_, err := ParseRun(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestMainDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	if o, code := Main([]string{"-h"}, &out, &errOut); o != nil || code != 0 {
		t.Errorf("-h: %v, %d", o, code)
	}
	help := out.String()
	for _, want := range []string{"commands:", "run flags:", "footprint:", "--max-gpus", "exit codes: 0 passed, 1 failed"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	// The command list, then a line a flag group and a flag, with 4 lines
	// of framing (no more), and none of Go's testing or klog flags.
	lines := strings.Count(commands, "\n") + len(groups) + len(runFlags(&RunOptions{})) + 4
	if n := strings.Count(help, "\n"); n > lines || strings.Contains(help, "test.") || strings.Contains(help, "v=") {
		t.Errorf("help is %d lines (want at most %d) or lists foreign flags:\n%s", n, lines, help)
	}
	if o, code := Main([]string{"frobnicate"}, &out, &errOut); o != nil || code != 2 {
		t.Errorf("unknown command: %v, %d", o, code)
	}
	if o, code := Main([]string{"run", "--scale=0"}, &out, &errOut); o != nil || code != 2 {
		t.Errorf("bad run flag: %v, %d", o, code)
	}
	if o, code := Main([]string{"--scale=3"}, &out, &errOut); o == nil || code != 0 || o.Scale != 3 {
		t.Errorf("no command means run: %+v, %d", o, code)
	}
}

// TestTimeoutIsTheSuitesOwnDeadline: --timeout must not become Go's
// -test.timeout, whose alarm panics the binary with no cleanup and no
// results. The run's context ends at --timeout with a cause naming it;
// the alarm is a backstop well after.
func TestTimeoutIsTheSuitesOwnDeadline(t *testing.T) {
	o, err := ParseRun([]string{"--timeout=60s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var backstop time.Duration
	for _, a := range o.TestArgs {
		if v, ok := strings.CutPrefix(a, "-test.timeout="); ok {
			if backstop, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if backstop < o.Timeout+10*time.Minute {
		t.Fatalf("-test.timeout=%s for --timeout=%s: Go's alarm would panic the run before it cleans up; want a backstop at least 10m later", backstop, o.Timeout)
	}
	o.Timeout = 20 * time.Millisecond
	ctx, cancel := o.Deadline(context.Background())
	defer cancel()
	<-ctx.Done()
	if cause := context.Cause(ctx); !IsTimeout(cause) || !strings.Contains(cause.Error(), "--timeout=20ms") {
		t.Errorf("the run's context ended with %v, want the --timeout named", cause)
	}
	if IsTimeout(context.Canceled) {
		t.Error("a cancelled context reads as the timeout")
	}
}

// TestDisruptiveDefaults: the leader kill is the run's own business on the
// clusters it made (local, kind) and opt-in on anyone else's.
func TestDisruptiveDefaults(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--profile=kind"}, true},
		{[]string{"--profile=cluster"}, false},
		{[]string{"--profile=cluster", "--disruptive"}, true},
		{[]string{"--profile=local", "--disruptive=false"}, false},
	} {
		o, err := ParseRun(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.Disruptive != tc.want {
			t.Errorf("%v: disruptive %v, want %v", tc.args, o.Disruptive, tc.want)
		}
	}
}

// TestDisruptiveActions: --dry-run lists the leader kill, taken or not and
// why, and the local testbed's XID cordon; filters leave them out.
func TestDisruptiveActions(t *testing.T) {
	parse := func(args ...string) *RunOptions {
		t.Helper()
		o, err := ParseRun(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	acts := parse("--profile=cluster", "--operator-namespace=ops").DisruptiveActions()
	if len(acts) != 1 || acts[0].Taken || !strings.Contains(acts[0].What, "force-delete") || !strings.Contains(acts[0].What, "ops/") ||
		!strings.Contains(acts[0].Why, "--disruptive not given") {
		t.Errorf("cluster: %+v, want the leader kill, not taken for want of --disruptive", acts)
	}
	if acts := parse("--profile=cluster", "--disruptive").DisruptiveActions(); len(acts) != 1 || !acts[0].Taken {
		t.Errorf("cluster --disruptive: %+v, want the leader kill taken", acts)
	}
	if acts := parse("--profile=cluster", "--disruptive", "--workload=vcjob").DisruptiveActions(); len(acts) != 1 || acts[0].Taken {
		t.Errorf("--workload=vcjob: %+v, want the leader kill not taken", acts)
	}
	if acts := parse().DisruptiveActions(); len(acts) != 2 || !acts[0].Taken || !strings.Contains(acts[1].What, "XID") {
		t.Errorf("local: %+v, want the leader kill and the XID cordon, both taken", acts)
	}
	if acts := parse("--feature=gang").DisruptiveActions(); len(acts) != 0 {
		t.Errorf("--feature=gang: %+v, want none", acts)
	}
	if acts := parse("--skip-assess=leader killed").DisruptiveActions(); len(acts) != 1 || acts[0].Feature != "inventory" {
		t.Errorf("--skip-assess=leader killed: %+v, want only the XID cordon", acts)
	}
}

// TestParseRunPrometheusFiles: --prometheus-url's token and CA files are
// read at parse time, so a missing or malformed one stops the run before
// it touches a cluster.
func TestParseRunPrometheusFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srv := httptest.NewTLSServer(nil)
	ca := write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	srv.Close()
	token := write("token", []byte("s3cret\n"))
	o, err := ParseRun([]string{"--prometheus-url=https://prometheus.monitoring:9090", "--prometheus-bearer-token-file=" + token, "--prometheus-ca-file=" + ca}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.PrometheusBearerTokenFile != token || o.PrometheusCAFile != ca {
		t.Errorf("parsed token file %q, CA file %q", o.PrometheusBearerTokenFile, o.PrometheusCAFile)
	}
	url := "--prometheus-url=https://prometheus:9090"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prometheus-bearer-token-file=" + token}, "--prometheus-bearer-token-file is for --prometheus-url"},
		{[]string{"--prometheus-ca-file=" + ca}, "--prometheus-ca-file is for --prometheus-url"},
		{[]string{url, "--prometheus-bearer-token-file=" + filepath.Join(dir, "nope")}, "--prometheus-bearer-token-file: reading the bearer token file: open"},
		{[]string{url, "--prometheus-bearer-token-file=" + write("empty", []byte("\n"))}, "is empty"},
		{[]string{url, "--prometheus-ca-file=" + filepath.Join(dir, "nope.pem")}, "--prometheus-ca-file: reading the CA file: open"},
		{[]string{url, "--prometheus-ca-file=" + token}, "--prometheus-ca-file: CA file " + token + " holds no PEM CERTIFICATE block"},
		{[]string{"--prometheus-url=http://prometheus:9090", "--prometheus-ca-file=" + ca}, "--prometheus-ca-file is for an https://"},
	} {
		_, err := ParseRun(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: the error shows the token: %v", tc.args, err)
		}
	}
}
