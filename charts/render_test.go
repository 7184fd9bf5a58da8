package charts

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/node-agent/dra"
)

// everythingOn sets every optional part and moves every value that has an
// effect away from its default.
const everythingOn = `
commonLabels: {team: platform}
imagePullSecrets: [regcred]
operator:
  replicas: 1
  leaderElection: {enabled: false}
  watchNamespaces: [team-a, team-b]
  reconcileConcurrency: 8
  reconcileTimeout: 2m
  kubeAPI: {qps: 75.5, burst: 150}
  logLevel: debug
  image: {tag: 0.3.0-rc.1, pullPolicy: Always}
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
  resources: {requests: {cpu: 200m, memory: 256Mi}, limits: {memory: 1Gi}}
  priorityClassName: system-cluster-critical
  podAnnotations: {example.com/scrape: "no"}
agent:
  nvml: mock:dgx-h100
  labelNode: false
  interval: 1m
  allowNoGPU: true
  ignoredXIDs: "13,31"
  logFormat: text
  deviceList: volume-mounts
  advertiseCapacity: true
  runtimeClassName: nvidia
  nodeSelector: {nvidia.com/gpu.present: "true"}
monitoring:
  labels: {release: kube-prometheus-stack}
  interval: 15s
  serviceMonitor: {enabled: true}
  podMonitor: {enabled: true}
  volcanoServiceMonitor: {enabled: true}
  prometheusRule: {enabled: true}
dashboards:
  enabled: true
  namespace: monitoring
  label: grafana_dashboard_custom
  labelValue: "yes"
  annotations: {grafana_folder: gpulab}
conformanceRunner:
  enabled: true
  image: {tag: 0.3.0-rc.1, pullPolicy: Always}
  args: [--max-gpus=8, --node-selector=pool=gpu]
  serviceAccount: {annotations: {example.com/role: conformance}}
`

// kustomizeObjects are the objects of `kubectl apply -k operator/config/default`
// and `-k node-agent/config` the chart templates (the CRDs come from crds/,
// the namespace from helm --create-namespace).
func kustomizeObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, f := range []string{
		"operator/config/rbac/role.yaml", "operator/config/rbac/leader_election_role.yaml", "operator/config/rbac/agent_heartbeat_role.yaml",
		"operator/config/rbac/metrics_auth_role.yaml", "operator/config/rbac/bindings.yaml", "operator/config/rbac/aggregate_roles.yaml",
		"operator/config/manager/manager.yaml", "operator/config/manager/pdb.yaml",
		"node-agent/config/serviceaccount.yaml", "node-agent/config/rbac.yaml",
		"node-agent/config/admission-policy.yaml", "node-agent/config/daemonset.yaml",
	} {
		for _, o := range decodeFile(t, repo(f)) {
			if o.GetKind() != "Namespace" {
				objs = append(objs, o)
			}
		}
	}
	return objs
}

func kustomizeObject(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range kustomizeObjects(t) {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in the kustomize manifests", kind, name)
	return nil
}

// TestDefaultsMatchKustomize: with the defaults and the release named
// gpulab, the chart renders the kustomize manifests' objects under their
// names, with the same pod security, resources, probes and scheduling.
func TestDefaultsMatchKustomize(t *testing.T) {
	r := render(t, loadChart(t), nil)
	want := map[string]bool{}
	for _, o := range kustomizeObjects(t) {
		want[o.GetKind()+"/"+o.GetName()] = true
	}
	got := map[string]bool{}
	for _, k := range r.kinds() {
		got[k] = true
	}
	if !maps.Equal(got, want) {
		t.Errorf("objects differ from the kustomize manifests:\nchart:     %v\nkustomize: %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for _, o := range r.objects {
		if ns := o.GetNamespace(); ns != "" && ns != namespace {
			t.Errorf("%s %s in namespace %q, want the release's", o.GetKind(), o.GetName(), ns)
		}
		if l := o.GetLabels(); l["app.kubernetes.io/part-of"] != "gpulab" || l["app.kubernetes.io/instance"] != releaseName {
			t.Errorf("%s %s labels %v lack part-of and instance", o.GetKind(), o.GetName(), l)
		}
	}

	t.Run("operator Deployment", func(t *testing.T) {
		var got, want appsv1.Deployment
		into(t, r.find(t, "Deployment", "gpulab-operator"), &got)
		into(t, kustomizeObject(t, "Deployment", "gpulab-operator"), &want)
		if *got.Spec.Replicas != *want.Spec.Replicas {
			t.Errorf("replicas %d, want %d", *got.Spec.Replicas, *want.Spec.Replicas)
		}
		gs, ws := got.Spec.Template.Spec, want.Spec.Template.Spec
		same(t, "serviceAccountName", gs.ServiceAccountName, ws.ServiceAccountName)
		same(t, "pod securityContext", gs.SecurityContext, ws.SecurityContext)
		gc, wc := gs.Containers[0], ws.Containers[0]
		same(t, "container securityContext", gc.SecurityContext, wc.SecurityContext)
		same(t, "resources", gc.Resources, wc.Resources)
		same(t, "ports", gc.Ports, wc.Ports)
		same(t, "livenessProbe", gc.LivenessProbe, wc.LivenessProbe)
		same(t, "readinessProbe", gc.ReadinessProbe, wc.ReadinessProbe)
		// The chart passes the operator's own defaults explicitly too.
		same(t, "args", gc.Args, append(slices.Clone(wc.Args), "--kube-api-qps=1000", "--kube-api-burst=2000", "--zap-log-level=info"))
		anti := gs.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		if len(anti) != 1 || anti[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" ||
			!reflect.DeepEqual(anti[0].PodAffinityTerm.LabelSelector.MatchLabels, got.Spec.Selector.MatchLabels) {
			t.Errorf("default affinity %s, want soft anti-affinity per hostname on the pods' selector", toYAML(gs.Affinity))
		}
		selects(t, got.Spec.Selector.MatchLabels, got.Spec.Template.Labels)
		if gs.ImagePullSecrets != nil || gs.NodeSelector != nil || gs.Tolerations != nil || gs.PriorityClassName != "" {
			t.Errorf("defaults set pull secrets %v, node selector %v, tolerations %v or priority %q", gs.ImagePullSecrets, gs.NodeSelector, gs.Tolerations, gs.PriorityClassName)
		}
	})

	t.Run("operator metrics Service", func(t *testing.T) {
		var svc corev1.Service
		into(t, r.find(t, "Service", "gpulab-operator-metrics"), &svc)
		var dep appsv1.Deployment
		into(t, r.find(t, "Deployment", "gpulab-operator"), &dep)
		selects(t, svc.Spec.Selector, dep.Spec.Template.Labels)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
			t.Errorf("ports %+v, want 8443 → metrics", svc.Spec.Ports)
		}
		// The ServiceMonitor's jobLabel turns this into job="gpulab-operator".
		if svc.Labels["app.kubernetes.io/name"] != "gpulab-operator" {
			t.Errorf("labels %v: app.kubernetes.io/name must be gpulab-operator", svc.Labels)
		}
	})

	t.Run("agent DaemonSet", func(t *testing.T) {
		var got, want appsv1.DaemonSet
		into(t, r.find(t, "DaemonSet", "gpulab-agent"), &got)
		into(t, kustomizeObject(t, "DaemonSet", "gpulab-agent"), &want)
		same(t, "updateStrategy", got.Spec.UpdateStrategy, want.Spec.UpdateStrategy)
		gs, ws := got.Spec.Template.Spec, want.Spec.Template.Spec
		same(t, "serviceAccountName", gs.ServiceAccountName, ws.ServiceAccountName)
		same(t, "priorityClassName", gs.PriorityClassName, ws.PriorityClassName)
		same(t, "affinity", gs.Affinity, ws.Affinity)
		same(t, "tolerations", gs.Tolerations, ws.Tolerations)
		same(t, "pod securityContext", gs.SecurityContext, ws.SecurityContext)
		same(t, "volumes", gs.Volumes, ws.Volumes)
		gc, wc := gs.Containers[0], ws.Containers[0]
		same(t, "container securityContext", gc.SecurityContext, wc.SecurityContext)
		same(t, "env", gc.Env, wc.Env)
		same(t, "resources", gc.Resources, wc.Resources)
		same(t, "ports", gc.Ports, wc.Ports)
		same(t, "livenessProbe", gc.LivenessProbe, wc.LivenessProbe)
		same(t, "readinessProbe", gc.ReadinessProbe, wc.ReadinessProbe)
		same(t, "volumeMounts", gc.VolumeMounts, wc.VolumeMounts)
		same(t, "args", gc.Args, []string{"--nvml=real", "--label-node=true", "--interval=30s", "--log-format=json",
			"--lease-namespace=" + namespace, "--metrics-bind-address=:8443", "--metrics-secure=true", "--health-probe-bind-address=:8081"})
		selects(t, got.Spec.Selector.MatchLabels, got.Spec.Template.Labels)
	})

	t.Run("admission policy", func(t *testing.T) {
		for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			got := r.find(t, kind, "gpulab-agent-own-node")
			want := kustomizeObject(t, kind, "gpulab-agent-own-node")
			same(t, kind+" spec", got.Object["spec"], want.Object["spec"])
		}
		// The policy finds the agent through the bindings with these labels.
		crb := r.find(t, "ClusterRoleBinding", "gpulab-agent").GetLabels()
		if crb["app.kubernetes.io/name"] != "gpulab-agent" || crb["app.kubernetes.io/part-of"] != "gpulab" {
			t.Errorf("the agent's ClusterRoleBinding labels %v do not match the policy's paramRef", crb)
		}
	})

	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap", "Secret"} {
		if n := r.count(kind); n != 0 {
			t.Errorf("defaults render %d %s objects; monitoring and dashboards are off by default", n, kind)
		}
	}
	if notes := r.files["gpulab/templates/NOTES.txt"]; !strings.Contains(notes, "helm show crds") || !strings.Contains(notes, "gpulab-system") {
		t.Errorf("NOTES.txt:\n%s", notes)
	}
}

// TestEverythingOn renders every optional part with non-default values and
// checks each reaches the objects.
func TestEverythingOn(t *testing.T) {
	r := render(t, loadChart(t), values(t, everythingOn))
	for _, o := range r.objects {
		if o.GetLabels()["team"] != "platform" {
			t.Errorf("%s %s lacks commonLabels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
	}

	t.Run("operator", func(t *testing.T) {
		var dep appsv1.Deployment
		into(t, r.find(t, "Deployment", "gpulab-operator"), &dep)
		if *dep.Spec.Replicas != 1 {
			t.Errorf("replicas %d, want 1", *dep.Spec.Replicas)
		}
		ps := dep.Spec.Template.Spec
		c := ps.Containers[0]
		same(t, "args", c.Args, []string{"--leader-elect=false", "--metrics-bind-address=:8443", "--metrics-secure=true",
			"--health-probe-bind-address=:8081", "--reconcile-concurrency=8", "--agent-lease-namespace=" + namespace, "--reconcile-timeout=2m",
			"--watch-namespace=team-a,team-b", "--kube-api-qps=75.5", "--kube-api-burst=150", "--zap-log-level=debug"})
		same(t, "image", c.Image, "ghcr.io/gpulab/gpulab-operator:0.3.0-rc.1")
		same(t, "pullPolicy", c.ImagePullPolicy, corev1.PullAlways)
		same(t, "imagePullSecrets", ps.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}})
		same(t, "nodeSelector", ps.NodeSelector, map[string]string{"node-role.kubernetes.io/control-plane": ""})
		same(t, "tolerations", ps.Tolerations, []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}})
		same(t, "priorityClassName", ps.PriorityClassName, "system-cluster-critical")
		same(t, "podAnnotations", dep.Spec.Template.Annotations, map[string]string{"example.com/scrape": "no"})
		if got := c.Resources.Limits.Memory().String(); got != "1Gi" {
			t.Errorf("memory limit %s, want 1Gi", got)
		}
		// Without leader election there is no Lease to guard.
		if r.has("Role", "gpulab-operator-leader-election") || r.has("RoleBinding", "gpulab-operator-leader-election") {
			t.Error("leader election is off but its Role or RoleBinding is rendered")
		}
	})

	t.Run("agent", func(t *testing.T) {
		var ds appsv1.DaemonSet
		into(t, r.find(t, "DaemonSet", "gpulab-agent"), &ds)
		ps := ds.Spec.Template.Spec
		c := ps.Containers[0]
		same(t, "args", c.Args, []string{"--nvml=mock:dgx-h100", "--label-node=false", "--interval=1m", "--log-format=text",
			"--lease-namespace=" + namespace, "--allow-no-gpu=true", "--ignored-xids=13,31", "--advertise-capacity=true",
			"--metrics-bind-address=:8443", "--metrics-secure=true", "--health-probe-bind-address=:8081"})
		if ps.RuntimeClassName == nil || *ps.RuntimeClassName != "nvidia" {
			t.Errorf("runtimeClassName %v, want nvidia", ps.RuntimeClassName)
		}
		same(t, "nodeSelector", ps.NodeSelector, map[string]string{"nvidia.com/gpu.present": "true"})
		// volume-mounts: as node-agent/config/volume-mounts patches it.
		if len(ps.Volumes) != 1 || ps.Volumes[0].HostPath == nil || ps.Volumes[0].HostPath.Path != "/dev/null" ||
			len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/var/run/nvidia-container-devices/all" ||
			c.VolumeMounts[0].Name != ps.Volumes[0].Name {
			t.Errorf("volumes %s, mounts %s: want /dev/null at /var/run/nvidia-container-devices/all", toYAML(ps.Volumes), toYAML(c.VolumeMounts))
		}
		r.find(t, "ClusterRole", "gpulab-agent-testbed-capacity")
		r.find(t, "ClusterRoleBinding", "gpulab-agent-testbed-capacity")
	})

	t.Run("monitors", func(t *testing.T) {
		for _, kn := range [][2]string{{"ServiceMonitor", "gpulab-operator"}, {"PodMonitor", "gpulab-agent"},
			{"ServiceMonitor", "gpulab-volcano-scheduler"}, {"PrometheusRule", "gpulab"}} {
			if l := r.find(t, kn[0], kn[1]).GetLabels(); l["release"] != "kube-prometheus-stack" {
				t.Errorf("%s %s labels %v lack monitoring.labels", kn[0], kn[1], l)
			}
		}
		sm := r.find(t, "ServiceMonitor", "gpulab-operator")
		var svc corev1.Service
		into(t, r.find(t, "Service", "gpulab-operator-metrics"), &svc)
		selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		selects(t, selector, svc.Labels)
		jobLabel, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel")
		same(t, "job of the ServiceMonitor", svc.Labels[jobLabel], "gpulab-operator")
		nsNames, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
		same(t, "ServiceMonitor namespaces", nsNames, []string{namespace})
		endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		want, _, _ := unstructured.NestedSlice(decodeFile(t, repo("dashboards/prometheus/operator/servicemonitor-operator.yaml"))[0].Object, "spec", "endpoints")
		setInterval(want, "15s")
		same(t, "ServiceMonitor endpoints (as dashboards/prometheus/operator)", endpoints, want)

		pm := r.find(t, "PodMonitor", "gpulab-agent")
		var ds appsv1.DaemonSet
		into(t, r.find(t, "DaemonSet", "gpulab-agent"), &ds)
		selector, _, _ = unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
		selects(t, selector, ds.Spec.Template.Labels)
		jobLabel, _, _ = unstructured.NestedString(pm.Object, "spec", "jobLabel")
		same(t, "job of the PodMonitor", ds.Spec.Template.Labels[jobLabel], "gpulab-agent")
		endpoints, _, _ = unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		want, _, _ = unstructured.NestedSlice(decodeFile(t, repo("dashboards/prometheus/operator/podmonitor-agent.yaml"))[0].Object, "spec", "podMetricsEndpoints")
		setInterval(want, "15s")
		same(t, "PodMonitor endpoints (as dashboards/prometheus/operator)", endpoints, want)

		// The token both present: a ServiceAccount's, bound to the reader role.
		secret := r.find(t, "Secret", "gpulab-metrics-reader-token")
		sa := secret.GetAnnotations()["kubernetes.io/service-account.name"]
		r.find(t, "ServiceAccount", sa)
		crb := r.find(t, "ClusterRoleBinding", "gpulab-metrics-reader")
		role, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name")
		r.find(t, "ClusterRole", role)
		same(t, "reader role", role, "gpulab-operator-metrics-reader")

		vsm := r.find(t, "ServiceMonitor", "gpulab-volcano-scheduler")
		same(t, "Volcano ServiceMonitor namespace", vsm.GetNamespace(), "volcano-system")
		// Volcano v1.14's queue counts come from vc-controller-manager,
		// behind the installer's volcano-controllers-service.
		csm := r.find(t, "ServiceMonitor", "gpulab-volcano-controller-manager")
		same(t, "Volcano controller ServiceMonitor namespace", csm.GetNamespace(), "volcano-system")
		selector, _, _ = unstructured.NestedStringMap(csm.Object, "spec", "selector", "matchLabels")
		selects(t, selector, map[string]string{"app": "volcano-controller"})
		endpoints, _, _ = unstructured.NestedSlice(csm.Object, "spec", "endpoints")
		if len(endpoints) != 1 {
			t.Fatalf("Volcano controller ServiceMonitor endpoints %v", endpoints)
		}
		port, _, _ := unstructured.NestedString(endpoints[0].(map[string]any), "port")
		relabel, _, _ := unstructured.NestedSlice(endpoints[0].(map[string]any), "relabelings")
		same(t, "Volcano controller ServiceMonitor port", port, "metrics")
		same(t, "Volcano controller job relabeling", relabel, []any{map[string]any{"targetLabel": "job", "replacement": "volcano-controller-manager"}})
	})

	t.Run("PrometheusRule", func(t *testing.T) {
		pr := r.find(t, "PrometheusRule", "gpulab")
		groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
		var want []any
		for _, f := range []string{"gpulab-recording.rules.yml", "gpulab-alerts.rules.yml"} {
			var doc map[string]any
			b, err := os.ReadFile(repo("dashboards", "prometheus", "rules", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			want = append(want, doc["groups"].([]any)...)
		}
		if len(want) < 2 {
			t.Fatalf("only %d rule groups in the sources", len(want))
		}
		same(t, "rule groups", groups, want)
		// And the same as the generated kustomize PrometheusRule.
		gen, _, _ := unstructured.NestedSlice(decodeFile(t, repo("dashboards/prometheus/operator/prometheusrule.yaml"))[0].Object, "spec", "groups")
		same(t, "rule groups (as prometheusrule.yaml)", groups, gen)
	})

	t.Run("dashboards", func(t *testing.T) {
		sources, err := filepath.Glob(repo("dashboards", "grafana", "*.json"))
		if err != nil || len(sources) == 0 {
			t.Fatalf("no dashboards (%v)", err)
		}
		if n := r.count("ConfigMap"); n != len(sources) {
			t.Errorf("%d dashboard ConfigMaps, want %d", n, len(sources))
		}
		for _, src := range sources {
			base := strings.TrimSuffix(filepath.Base(src), ".json")
			var cm corev1.ConfigMap
			into(t, r.find(t, "ConfigMap", "gpulab-dashboard-"+base), &cm)
			same(t, "namespace", cm.Namespace, "monitoring")
			same(t, "sidecar label", cm.Labels["grafana_dashboard_custom"], "yes")
			same(t, "annotations", cm.Annotations, map[string]string{"grafana_folder": "gpulab"})
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			data := cm.Data["gpulab-"+base+".json"]
			if data != string(b) {
				t.Errorf("ConfigMap %s does not carry %s byte for byte (%d bytes, want %d)", cm.Name, src, len(data), len(b))
			}
			var dash struct{ UID string }
			if err := json.Unmarshal([]byte(data), &dash); err != nil || dash.UID == "" {
				t.Errorf("%s: not a dashboard with a uid (%v)", cm.Name, err)
			}
		}
	})
}

// TestDashboardsDefaultLabel: kube-prometheus-stack's sidecar selects
// grafana_dashboard: "1" in the release's namespace unless told otherwise.
func TestDashboardsDefaultLabel(t *testing.T) {
	r := render(t, loadChart(t), values(t, "dashboards: {enabled: true}"))
	var cm corev1.ConfigMap
	into(t, r.find(t, "ConfigMap", "gpulab-dashboard-operator"), &cm)
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != namespace {
		t.Errorf("labels %v in %s, want grafana_dashboard=1 in %s", cm.Labels, cm.Namespace, namespace)
	}
}

// TestOtherReleaseName: another release name prefixes every object and
// keeps the job labels the alerts and dashboards need.
func TestOtherReleaseName(t *testing.T) {
	ch := loadChart(t)
	rv := values(t, "fullnameOverride: lab")
	r := render(t, ch, rv)
	for _, o := range r.objects {
		if !strings.HasPrefix(o.GetName(), "lab-") && o.GetName() != "lab" {
			t.Errorf("%s %s is not prefixed by the fullname", o.GetKind(), o.GetName())
		}
	}
	var dep appsv1.Deployment
	into(t, r.find(t, "Deployment", "lab-operator"), &dep)
	same(t, "job label", dep.Spec.Template.Labels["app.kubernetes.io/name"], "gpulab-operator")
	binding := r.find(t, "ValidatingAdmissionPolicyBinding", "lab-agent-own-node")
	policy, _, _ := unstructured.NestedString(binding.Object, "spec", "policyName")
	same(t, "policyName", policy, "lab-agent-own-node")
}

func setInterval(endpoints []any, interval string) {
	for _, e := range endpoints {
		e.(map[string]any)["interval"] = interval
	}
}

// same fails the test when got and want differ, showing both as YAML.
func same[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s differs:\ngot:\n%s\nwant:\n%s", what, toYAML(got), toYAML(want))
	}
}

// selects fails unless every selector label is among labels.
func selects(t *testing.T, selector, labels map[string]string) {
	t.Helper()
	if len(selector) == 0 {
		t.Errorf("empty selector")
	}
	for k, v := range selector {
		if labels[k] != v {
			t.Errorf("selector %v does not select labels %v", selector, labels)
			return
		}
	}
}

// TestOperatorPDBOnlyWithAStandby: a budget for a single replica would
// block every node drain, so one is rendered only with two or more.
func TestOperatorPDBOnlyWithAStandby(t *testing.T) {
	ch := loadChart(t)
	if r := render(t, ch, values(t, "operator: {replicas: 1, leaderElection: {enabled: false}}")); r.has("PodDisruptionBudget", "gpulab-operator") {
		t.Error("a PodDisruptionBudget for one replica")
	}
	if r := render(t, ch, nil); !r.has("PodDisruptionBudget", "gpulab-operator") {
		t.Error("no PodDisruptionBudget for the default two replicas")
	}
}

// TestOperatorAPIPriority: the FlowSchema is rendered only when asked for,
// and gives the operator's own ServiceAccount its own priority level.
func TestOperatorAPIPriority(t *testing.T) {
	ch := loadChart(t)
	if r := render(t, ch, nil); r.has("FlowSchema", "gpulab-operator") || r.has("PriorityLevelConfiguration", "gpulab-operator") {
		t.Error("API Priority and Fairness objects without operator.apiPriority.enabled")
	}
	r := render(t, ch, values(t, "operator: {apiPriority: {enabled: true, concurrencyShares: 40}}"))
	if !r.has("PriorityLevelConfiguration", "gpulab-operator") {
		t.Fatal("no PriorityLevelConfiguration with operator.apiPriority.enabled")
	}
	var fs flowcontrolv1.FlowSchema
	into(t, r.find(t, "FlowSchema", "gpulab-operator"), &fs)
	if fs.Spec.PriorityLevelConfiguration.Name != "gpulab-operator" || len(fs.Spec.Rules) != 1 ||
		len(fs.Spec.Rules[0].Subjects) != 1 || fs.Spec.Rules[0].Subjects[0].ServiceAccount == nil ||
		fs.Spec.Rules[0].Subjects[0].ServiceAccount.Name != "gpulab-operator" ||
		fs.Spec.Rules[0].Subjects[0].ServiceAccount.Namespace != namespace {
		t.Errorf("FlowSchema %s: want the operator's ServiceAccount in %s to its own level", toYAML(fs.Spec), namespace)
	}
	var plc flowcontrolv1.PriorityLevelConfiguration
	into(t, r.find(t, "PriorityLevelConfiguration", "gpulab-operator"), &plc)
	if plc.Spec.Limited == nil || plc.Spec.Limited.NominalConcurrencyShares == nil || *plc.Spec.Limited.NominalConcurrencyShares != 40 {
		t.Errorf("PriorityLevelConfiguration %s: want nominalConcurrencyShares 40", toYAML(plc.Spec))
	}

	// At the default shares, the chart renders what the kustomize
	// component operator/config/apf ships.
	r = render(t, ch, values(t, "operator: {apiPriority: {enabled: true}}"))
	for _, o := range decodeFile(t, repo("operator/config/apf/flowschema.yaml")) {
		same(t, o.GetKind()+" spec", r.find(t, o.GetKind(), o.GetName()).Object["spec"], o.Object["spec"])
	}
}

// draOn turns the agent's DRA mode on, with another driver name.
const draOn = "agent: {nvml: 'mock:dgx-h100', dra: {enabled: true, driverName: gpu.example.com, cdiDir: /etc/cdi}}"

// TestAgentDRA: agent.dra turns the kubelet plugin on as the dra kustomize
// component does (the flags, the host's plugin and CDI folders at the
// paths the kubelet and the runtime use, root), and renders the
// DeviceClass the agent's own code builds for that driver; with
// advertiseCapacity it refuses to render.
func TestAgentDRA(t *testing.T) {
	ch := loadChart(t)
	r := render(t, ch, values(t, draOn))
	var ds appsv1.DaemonSet
	into(t, r.find(t, "DaemonSet", "gpulab-agent"), &ds)
	ps := ds.Spec.Template.Spec
	c := ps.Containers[0]
	if !slices.Contains(c.Args, "--dra-driver=gpu.example.com") || !slices.Contains(c.Args, "--dra-cdi-dir=/etc/cdi") {
		t.Errorf("args %v: want --dra-driver=gpu.example.com and --dra-cdi-dir=/etc/cdi", c.Args)
	}
	hostPaths := map[string]string{}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = hostPaths[m.Name]
	}
	same(t, "mounts (container path → host path)", mounts, map[string]string{
		"/var/lib/kubelet/plugins_registry": "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins": "/var/lib/kubelet/plugins", "/etc/cdi": "/etc/cdi"})
	if sc := ps.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot ||
		sc.SeccompProfile == nil {
		t.Errorf("pod security context %s: want root, the default seccomp profile kept", toYAML(sc))
	}
	var dc resourceapi.DeviceClass
	into(t, r.find(t, "DeviceClass", "gpu.example.com"), &dc)
	same(t, "DeviceClass spec", dc.Spec, dra.DeviceClass("gpu.example.com").Spec)

	if _, err := renderFiles(ch, values(t, "agent: {advertiseCapacity: true, dra: {enabled: true}}")); err == nil || !strings.Contains(err.Error(), "conflict") {
		t.Errorf("dra with advertiseCapacity rendered: %v", err)
	}
	if off := render(t, ch, nil); off.has("DeviceClass", "gpu.gpulab.io") || off.has("ClusterRole", "gpulab-agent-dra") {
		t.Error("the defaults render DRA objects")
	}
}
