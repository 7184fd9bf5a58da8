package dashboards_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/dashboards"
	"github.com/gpulab/gpulab/testbeds/binaries"
)

// promtool is the one `make testbed-binaries` builds into the cache.
func promtool(t *testing.T) string {
	t.Helper()
	m, err := binaries.LookupMonitoring(t.Context(), binaries.Options{})
	if err != nil {
		if testing.Short() {
			t.Skipf("%v; required without -short", err)
		}
		t.Fatal(err)
	}
	return m.Promtool
}

// TestRules runs promtool over the rule files and their unit tests, and
// checks every alert has a unit test that expects it to fire.
func TestRules(t *testing.T) {
	bin := promtool(t)
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(append([]string{"check", "rules"}, dashboards.RuleFiles...)...)
	tests, err := filepath.Glob("prometheus/tests/*.test.yml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests: %v", err)
	}
	run(append([]string{"test", "rules"}, tests...)...)

	alerts := map[string]bool{}
	for _, f := range dashboards.RuleFiles {
		var rf struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
				} `json:"rules"`
			} `json:"groups"`
		}
		readYAML(t, f, &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts[r.Alert] = false
				}
			}
		}
	}
	for _, f := range tests {
		var tf struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string `json:"alertname"`
					ExpAlerts []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		readYAML(t, f, &tf)
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTest {
				if _, ok := alerts[a.Alertname]; !ok {
					t.Errorf("%s tests unknown alert %s", f, a.Alertname)
				}
				if len(a.ExpAlerts) > 0 {
					alerts[a.Alertname] = true
				}
			}
		}
	}
	for name, fired := range alerts {
		if !fired {
			t.Errorf("alert %s has no unit test expecting it to fire", name)
		}
	}
}

// TestLocalScrapeConfig checks the local testbed's Prometheus config.
func TestLocalScrapeConfig(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	copyTree(t, "prometheus", dir)
	if err := (dashboards.LocalTargets{Operator: "127.0.0.1:1", Agent: "127.0.0.1:2", VolcanoScheduler: "127.0.0.1:3", Pushgateway: "127.0.0.1:4", Cluster: "lab"}).Write(filepath.Join(dir, "local", "targets")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "config", filepath.Join(dir, "local", "prometheus.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	readYAML(t, filepath.Join(dir, "local", "targets", "gpulab-agent.json"), &groups)
	if len(groups) != 1 || groups[0].Labels["cluster"] != "lab" {
		t.Errorf("gpulab-agent targets %+v: want one group labelled cluster=lab", groups)
	}
}

// TestMonitorsSelectTheInstall checks the Prometheus-Operator monitors select
// the Service and DaemonSet gpulab installs, by label, namespace and port.
func TestMonitorsSelectTheInstall(t *testing.T) {
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			JobLabel          string                                  `json:"jobLabel"`
			Selector          struct{ MatchLabels map[string]string } `json:"selector"`
			NamespaceSelector struct{ MatchNames []string }           `json:"namespaceSelector"`
			Endpoints         []struct{ Port string }                 `json:"endpoints"`
			PodEndpoints      []struct{ Port string }                 `json:"podMetricsEndpoints"`
			Ports             []struct{ Name string }                 `json:"ports"`
			Template          struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					Containers []struct {
						Ports []struct{ Name string } `json:"ports"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	load := func(path string) []object {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []object
		for _, doc := range strings.Split(string(data), "\n---") {
			var o object
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if o.Kind != "" {
				out = append(out, o)
			}
		}
		return out
	}
	find := func(objs []object, kind, name string) object {
		for _, o := range objs {
			if o.Kind == kind && o.Metadata.Name == name {
				return o
			}
		}
		t.Fatalf("no %s %s", kind, name)
		return object{}
	}
	selects := func(sel, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	svc := find(load("../operator/config/manager/manager.yaml"), "Service", "gpulab-operator-metrics")
	sm := find(load("prometheus/operator/servicemonitor-operator.yaml"), "ServiceMonitor", "gpulab-operator")
	if !selects(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select Service labels %v", sm.Spec.Selector.MatchLabels, svc.Metadata.Labels)
	}
	if svc.Metadata.Labels[sm.Spec.JobLabel] != "gpulab-operator" {
		t.Errorf("ServiceMonitor jobLabel %q gives job %q, the alerts expect gpulab-operator", sm.Spec.JobLabel, svc.Metadata.Labels[sm.Spec.JobLabel])
	}
	if len(sm.Spec.Endpoints) != 1 || len(svc.Spec.Ports) == 0 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("ServiceMonitor endpoints %v do not name the Service's port %v", sm.Spec.Endpoints, svc.Spec.Ports)
	}
	if ns := sm.Spec.NamespaceSelector.MatchNames; len(ns) != 1 || ns[0] != svc.Metadata.Namespace {
		t.Errorf("ServiceMonitor namespaces %v, Service in %q", ns, svc.Metadata.Namespace)
	}

	ds := find(load("../node-agent/config/daemonset.yaml"), "DaemonSet", "gpulab-agent")
	pm := find(load("prometheus/operator/podmonitor-agent.yaml"), "PodMonitor", "gpulab-agent")
	podLabels := ds.Spec.Template.Metadata.Labels
	if !selects(pm.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodMonitor selector %v does not select agent pods %v", pm.Spec.Selector.MatchLabels, podLabels)
	}
	if podLabels[pm.Spec.JobLabel] != "gpulab-agent" {
		t.Errorf("PodMonitor jobLabel %q gives job %q, the alerts expect gpulab-agent", pm.Spec.JobLabel, podLabels[pm.Spec.JobLabel])
	}
	ports := map[string]bool{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
	}
	if len(pm.Spec.PodEndpoints) != 1 || !ports[pm.Spec.PodEndpoints[0].Port] {
		t.Errorf("PodMonitor endpoints %v do not name an agent container port %v", pm.Spec.PodEndpoints, ports)
	}
	if ns := pm.Spec.NamespaceSelector.MatchNames; len(ns) != 1 || ns[0] != ds.Metadata.Namespace {
		t.Errorf("PodMonitor namespaces %v, DaemonSet in %q", ns, ds.Metadata.Namespace)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// copyTree copies the regular files under src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
