package charts

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSchemaRejectsBadValues: values that can never work fail at render
// time, naming the value, before anything reaches the cluster.
func TestSchemaRejectsBadValues(t *testing.T) {
	ch := loadChart(t)
	for _, c := range []struct{ name, values, want string }{
		{"no replicas", "operator: {replicas: 0}", "replicas"},
		{"two replicas without leader election", "operator: {replicas: 2, leaderElection: {enabled: false}}", "replicas"},
		{"fractional replicas", "operator: {replicas: 1.5}", "replicas"},
		{"unknown NVML profile", "agent: {nvml: mock:dgx-z999}", "nvml"},
		{"bad NVML mode", "agent: {nvml: fake}", "nvml"},
		{"interval without unit", "agent: {interval: \"30\"}", "interval"},
		{"sub-second interval", "agent: {interval: 500ms}", "interval"},
		{"zero interval", "agent: {interval: 0m0s}", "interval"},
		{"latest tag", "operator: {image: {tag: latest}}", "tag"},
		{"bad pull policy", "agent: {image: {pullPolicy: Sometimes}}", "pullPolicy"},
		{"bad watch namespace", "operator: {watchNamespaces: [Team_A]}", "watchNamespaces"},
		{"zero QPS", "operator: {kubeAPI: {qps: 0}}", "qps"},
		{"zero concurrency", "operator: {reconcileConcurrency: 0}", "reconcileConcurrency"},
		{"bad reconcile timeout", "operator: {reconcileTimeout: soon}", "reconcileTimeout"},
		{"bad log level", "operator: {logLevel: loud}", "logLevel"},
		{"bad log format", "agent: {logFormat: xml}", "logFormat"},
		{"bad XID list", "agent: {ignoredXIDs: \"13,abc\"}", "ignoredXIDs"},
		{"bad device list", "agent: {deviceList: cdi}", "deviceList"},
		{"typo in a key", "operator: {replica: 2}", "replica"},
		{"unknown top-level key", "operater: {}", "operater"},
		{"numeric dashboard label value", "dashboards: {labelValue: 1}", "labelValue"},
		{"bad dashboard label key", "dashboards: {label: \"grafana dashboard\"}", "label"},
		{"port out of range", "agent: {metrics: {port: 70000}}", "port"},
		{"a label the chart sets", "commonLabels: {app.kubernetes.io/name: x}", "app.kubernetes.io/name"},
		{"a pod label the chart sets", "agent: {podLabels: {app.kubernetes.io/instance: x}}", "app.kubernetes.io/instance"},
		{"monitoring labels not strings", "monitoring: {labels: {release: {name: x}}}", "release"},
		{"runner not a boolean", "conformanceRunner: {enabled: \"yes\"}", "enabled"},
		{"runner latest tag", "conformanceRunner: {image: {tag: latest}}", "tag"},
		{"runner bad pull policy", "conformanceRunner: {image: {pullPolicy: Sometimes}}", "pullPolicy"},
		{"runner typo in a key", "conformanceRunner: {arg: [--max-gpus=8]}", "arg"},
		{"runner args not a list", "conformanceRunner: {args: --max-gpus=8}", "args"},
		{"runner arg not a flag", "conformanceRunner: {args: [--max-gpus, \"8\"]}", "args"},
		{"runner arg turning the dry run off", "conformanceRunner: {args: [--dry-run=false]}", "args"},
		{"runner arg with one dash", "conformanceRunner: {args: [-dry-run=false]}", "args"},
		{"runner arg changing the profile", "conformanceRunner: {args: [--profile=local]}", "args"},
		{"runner arg changing the operator namespace", "conformanceRunner: {args: [--operator-namespace=other]}", "args"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderFiles(ch, values(t, c.values))
			if err == nil {
				t.Fatalf("values %s were accepted", c.values)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("values %s: error does not come from the schema or does not name %q:\n%v", c.values, c.want, err)
			}
		})
	}
}

// TestSchemaAcceptsGoodValues: the schema is not stricter than the
// programs: every NVML profile, an empty XID list, integer log levels.
func TestSchemaAcceptsGoodValues(t *testing.T) {
	ch := loadChart(t)
	for _, v := range []string{
		"agent: {nvml: mock:dgx-a100}", "agent: {nvml: mock:dgx-b200}", "agent: {nvml: mock:dgx-h200}",
		"agent: {ignoredXIDs: \"\"}", "agent: {ignoredXIDs: \"13, 31,43\"}", "agent: {interval: 1m30s}",
		"operator: {logLevel: \"3\"}", "operator: {replicas: 1, leaderElection: {enabled: false}}",
		"operator: {replicas: 5}", "operator: {reconcileTimeout: 90s}", "operator: {kubeAPI: {qps: 0.5, burst: 1}}",
		"operator: {enabled: false}", "agent: {enabled: false}", "agent: {admissionPolicy: {enabled: false}}",
		"dashboards: {enabled: true, label: example.com/dashboard, labelValue: \"\"}",
		"fullnameOverride: lab", "global: {imageRegistry: x}",
		"conformanceRunner: {enabled: true, args: [--max-gpus=8, --node-selector=pool=gpu, --workload=vcjob, -verbose]}",
		"conformanceRunner: {serviceAccount: {annotations: {eks.amazonaws.com/role-arn: x}}}",
	} {
		if _, err := renderFiles(ch, values(t, v)); err != nil {
			t.Errorf("values %s: %v", v, err)
		}
	}
}

// schemaNVMLModes returns the NVML modes values.schema.json allows.
func schemaNVMLModes(t *testing.T) []string {
	t.Helper()
	var schema struct {
		Properties struct {
			Agent struct {
				Properties struct {
					NVML struct {
						Enum []string `json:"enum"`
					} `json:"nvml"`
				} `json:"properties"`
			} `json:"agent"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(loadChart(t).Schema, &schema); err != nil {
		t.Fatal(err)
	}
	modes := schema.Properties.Agent.Properties.NVML.Enum
	if len(modes) < 2 || modes[0] != "real" {
		t.Fatalf("the schema's NVML modes %v lack real or the mocks", modes)
	}
	return modes
}
