package cli

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

func TestSplitSubmitArgs(t *testing.T) {
	sf, rest, err := splitSubmitArgs([]string{"--wait-timeout", "90m", "--runner-namespace-allow-system", "--runner-namespace=gpulab-system", "--max-gpus=8"})
	if err != nil || sf.waitTimeout != 90*time.Minute || !sf.allowSystem || sf.namespace != "gpulab-system" || !slices.Equal(rest, []string{"--max-gpus=8"}) {
		t.Errorf("got %+v %v %v", sf, rest, err)
	}
	if sf, _, err := splitSubmitArgs(nil); err != nil || sf.waitTimeout != 0 || sf.allowSystem {
		t.Errorf("defaults: %+v %v; want no wait timeout given and no system namespace", sf, err)
	}
	for _, bad := range [][]string{{"--wait-timeout=0s"}, {"--wait-timeout=soon"}, {"--wait-timeout"}, {"--runner-namespace-allow-system=maybe"}, {"--runner-namespace=Kube_System"}} {
		if _, _, err := splitSubmitArgs(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The files the run reads are carried into the pod and the flags point at
// them there; --perfdata, an output folder, points into the results.
func TestCarryRewritesFileFlags(t *testing.T) {
	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "ca.pem")
	srv := httptest.NewTLSServer(nil)
	testCA := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	srv.Close()
	for path, data := range map[string]string{token: "s3cr3t\n", ca: testCA} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := filepath.Join(dir, "baseline")
	for _, n := range []string{"n1", "n2"} {
		if err := sampleRun([]string{"latency"}, map[string]float64{"latency/x": 1}).Write(filepath.Join(base, n)); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--prometheus-url=https://prom:9090", "--prometheus-bearer-token-file", token, "--prometheus-ca-file=" + ca,
		"--pushgateway-url=http://pg:9091", "--push-baseline=" + base, "--perfdata=" + filepath.Join(dir, "perf"), "--max-gpus=8"}
	o, err := ParseRun(append([]string{"--profile=cluster"}, args...), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	files, rewrite, err := carry(o)
	if err != nil {
		t.Fatal(err)
	}
	if string(files.PrometheusToken) != "s3cr3t\n" || string(files.PrometheusCA) != testCA || len(files.Baseline) != 2 {
		t.Errorf("carried %+v", files)
	}
	got := podArgs(args, rewrite)
	want := []string{"--prometheus-url=https://prom:9090", "--pushgateway-url=http://pg:9091", "--max-gpus=8",
		"--perfdata=" + incluster.PerfDataDir, "--prometheus-bearer-token-file=" + incluster.PrometheusTokenPath,
		"--prometheus-ca-file=" + incluster.PrometheusCAPath, "--push-baseline=" + incluster.BaselineDir}
	if !slices.Equal(got, want) {
		t.Errorf("pod args\n got %v\nwant %v", got, want)
	}
	for _, a := range got {
		if strings.Contains(a, dir) {
			t.Errorf("pod arg %s names the submitter's disk", a)
		}
	}
	// The pod mounts each carried file where its flag now points.
	job := incluster.Job(incluster.Options{Image: "i", RunID: "r1", Files: files, Args: got})
	mounted := map[string]bool{}
	for _, m := range job.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted[m.MountPath] = true
	}
	for _, p := range []string{filepath.Dir(incluster.PrometheusTokenPath), incluster.BaselineDir} {
		if !mounted[p] {
			t.Errorf("nothing mounted at %s", p)
		}
	}

	// One baseline file keeps its name: a file is read as it is.
	o.PushBaseline = filepath.Join(base, "n1", "results.json")
	files, rewrite, err = carry(o)
	if err != nil || rewrite["push-baseline"] != incluster.BaselineDir+"/results.json" || len(files.Baseline) != 1 {
		t.Errorf("one baseline file: %v %v %v", files.Baseline, rewrite, err)
	}
	// A baseline too large for a ConfigMap is refused, naming the flag.
	if err := os.WriteFile(o.PushBaseline, bytes.Repeat([]byte(" "), maxBaseline+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := carry(o); err == nil || !strings.Contains(err.Error(), "--push-baseline") {
		t.Errorf("an oversized baseline: %v", err)
	}
}

// A run whose pod cannot be created (a ResourceQuota of no pods) ends
// submit within --wait-timeout with an error naming the quota, instead of
// waiting forever. Real components: envtest's kube-apiserver (its
// ResourceQuota admission) and kube-controller-manager's Job and
// ResourceQuota controllers only, from the testbed's binaries; the local
// testbed would add a scheduler, Volcano and nodes this does not need.
func TestSubmitEndsOnAPodThatCannotBeCreated(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	set, err := binaries.Lookup(ctx, binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	env := envtest.StartForTest(t, envtest.Options{})
	startControllers(t, set.KubeControllerManager, env, "job-controller", "resourcequota-controller")
	const ns = "quota-runner"
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if err := c.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// The quota controller counts it first, as on any cluster.
	if err := poll.Until(ctx, time.Minute, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(quota), quota)
		return err == nil && quota.Status.Hard != nil, "ResourceQuota no-pods has no status yet"
	}); err != nil {
		t.Fatal(err)
	}
	admin, err := env.AsUser("admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := submitCommand([]string{"--kubeconfig=" + writeKubeconfig(t, admin), "--runner-namespace=" + ns, "--runner-image=gpulab-conformance:dev",
		"--wait-timeout=30s", "--run-id=quota"}, &stdout, &stderr)
	took := time.Since(start)
	if code != 1 || !strings.Contains(stderr.String(), "exceeded quota: no-pods") || !strings.Contains(stderr.String(), "--wait-timeout=30s passed") {
		t.Errorf("submit exited %d after %s:\n%s\n%s\nwant 1 and an error naming the quota", code, took, stdout.String(), stderr.String())
	}
	if took > 45*time.Second {
		t.Errorf("submit took %s, want about its 30s --wait-timeout", took)
	}
}

// startControllers runs kube-controller-manager against env with only the
// named controllers, until the test ends.
func startControllers(t *testing.T, binary string, env *envtest.Environment, controllers ...string) {
	t.Helper()
	cfg, err := env.AsUser("system:kube-controller-manager", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(t.TempDir(), "kube-controller-manager.log")
	log, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	// No serving port: nothing here asks it for health or metrics.
	cmd := exec.Command(binary, "--kubeconfig="+writeKubeconfig(t, cfg), "--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false", "--secure-port=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logs)
			t.Logf("kube-controller-manager's log:\n%s", lastLines(string(data), 40))
		}
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
