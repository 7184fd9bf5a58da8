package charts

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/gpulab/gpulab/conformance/cli"
)

const (
	conformanceName = "gpulab-conformance"
	conformanceTest = "gpulab-conformance-test"
)

// TestConformanceRunnerOffByDefault: without conformanceRunner.enabled the
// chart renders none of the runner's objects and no hook at all.
func TestConformanceRunnerOffByDefault(t *testing.T) {
	r := render(t, loadChart(t), nil)
	for _, o := range r.objects {
		if o.GetLabels()["app.kubernetes.io/name"] == conformanceName || strings.HasPrefix(o.GetName(), conformanceName) {
			t.Errorf("defaults render the conformance runner's %s %s", o.GetKind(), o.GetName())
		}
		if _, ok := o.GetAnnotations()["helm.sh/hook"]; ok {
			t.Errorf("defaults render a hook: %s %s", o.GetKind(), o.GetName())
		}
	}
	if n := r.count("Pod"); n != 0 {
		t.Errorf("defaults render %d Pods", n)
	}
}

// TestConformanceRunnerHook: the `helm test` pod runs the suite's preflight
// and dry run against the release's operator, as the ServiceAccount the
// chart binds to the suite's ClusterRole, at the restricted Pod Security
// level; only the pod is a hook (the RBAC must exist before it runs).
func TestConformanceRunnerHook(t *testing.T) {
	ch := loadChart(t)
	r := render(t, ch, values(t, everythingOn))
	var pod corev1.Pod
	into(t, r.find(t, "Pod", conformanceTest), &pod)
	same(t, "hook annotations", pod.Annotations, map[string]string{
		"helm.sh/hook": "test", "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"})
	same(t, "namespace", pod.Namespace, namespace)
	ps := pod.Spec
	same(t, "restartPolicy", ps.RestartPolicy, corev1.RestartPolicyNever)
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 0 {
		t.Fatalf("%d containers, %d init containers: want the suite alone", len(ps.Containers), len(ps.InitContainers))
	}
	c := ps.Containers[0]
	same(t, "args", c.Args, []string{"run", "--profile=cluster", "--dry-run", "--operator-namespace=" + namespace,
		"--max-gpus=8", "--node-selector=pool=gpu"})
	same(t, "image", c.Image, "ghcr.io/gpulab/gpulab-conformance:0.3.0-rc.1")
	same(t, "pullPolicy", c.ImagePullPolicy, corev1.PullAlways)
	same(t, "imagePullSecrets", ps.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}})
	restricted(t, &pod)
	// The image's user, as conformance/runner's Job runs it.
	sc := ps.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
		t.Errorf("pod securityContext %s: want runAsUser and runAsGroup 65532", toYAML(sc))
	}
	// Read-only root: temporary files go to an emptyDir at /tmp.
	if c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is writable")
	}
	same(t, "env", c.Env, []corev1.EnvVar{{Name: "TMPDIR", Value: "/tmp"}})
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/tmp" || len(ps.Volumes) != 1 ||
		ps.Volumes[0].Name != c.VolumeMounts[0].Name || ps.Volumes[0].EmptyDir == nil {
		t.Errorf("volumes %s, mounts %s: want an emptyDir at /tmp", toYAML(ps.Volumes), toYAML(c.VolumeMounts))
	}

	if notes := r.files["gpulab/templates/NOTES.txt"]; !strings.Contains(notes, "helm test gpulab --namespace "+namespace) {
		t.Errorf("NOTES.txt does not say how to run the test:\n%s", notes)
	}

	t.Run("runs as the bound ServiceAccount", func(t *testing.T) {
		same(t, "serviceAccountName", ps.ServiceAccountName, conformanceName)
		var sa corev1.ServiceAccount
		into(t, r.find(t, "ServiceAccount", conformanceName), &sa)
		same(t, "ServiceAccount namespace", sa.Namespace, namespace)
		same(t, "ServiceAccount annotations", sa.Annotations, map[string]string{"example.com/role": "conformance"})
		var crb rbacv1.ClusterRoleBinding
		into(t, r.find(t, "ClusterRoleBinding", conformanceName), &crb)
		same(t, "subjects", crb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: conformanceName, Namespace: namespace}})
		same(t, "roleRef", crb.RoleRef, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: conformanceName})
		r.find(t, "ClusterRole", conformanceName)
		for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
			if _, ok := r.find(t, kind, conformanceName).GetAnnotations()["helm.sh/hook"]; ok {
				t.Errorf("the %s is a hook: it must be installed with the release, before the test", kind)
			}
		}
	})

	t.Run("the suite parses the args", func(t *testing.T) {
		var stderr bytes.Buffer
		o, code := cli.Main(c.Args, &bytes.Buffer{}, &stderr)
		if o == nil {
			t.Fatalf("gpulab-conformance %v: exit %d: %s", c.Args, code, stderr.String())
		}
		if !o.DryRun || o.Profile != "cluster" || o.OperatorNamespace != namespace {
			t.Errorf("parsed dry run %v, profile %q, operator namespace %q: want a dry run on the cluster against %s",
				o.DryRun, o.Profile, o.OperatorNamespace, namespace)
		}
		if o, _ := cli.Main(append(slices.Clone(c.Args), "--no-such-flag=1"), &bytes.Buffer{}, &bytes.Buffer{}); o != nil {
			t.Error("the suite accepted an unknown flag: this check cannot tell")
		}
	})

	t.Run("defaults", func(t *testing.T) {
		r := render(t, ch, values(t, "conformanceRunner: {enabled: true}"))
		var pod corev1.Pod
		into(t, r.find(t, "Pod", conformanceTest), &pod)
		c := pod.Spec.Containers[0]
		same(t, "args", c.Args, []string{"run", "--profile=cluster", "--dry-run", "--operator-namespace=" + namespace})
		same(t, "image", c.Image, "ghcr.io/gpulab/gpulab-conformance:"+ch.Metadata.AppVersion)
		same(t, "pullPolicy", c.ImagePullPolicy, corev1.PullIfNotPresent)
		if pod.Spec.ImagePullSecrets != nil {
			t.Errorf("imagePullSecrets %v without any asked for", pod.Spec.ImagePullSecrets)
		}
	})

	t.Run("other release name", func(t *testing.T) {
		r := render(t, ch, values(t, "fullnameOverride: lab\nconformanceRunner: {enabled: true}"))
		var pod corev1.Pod
		into(t, r.find(t, "Pod", "lab-conformance-test"), &pod)
		same(t, "serviceAccountName", pod.Spec.ServiceAccountName, "lab-conformance")
		var crb rbacv1.ClusterRoleBinding
		into(t, r.find(t, "ClusterRoleBinding", "lab-conformance"), &crb)
		same(t, "roleRef", crb.RoleRef.Name, "lab-conformance")
		same(t, "subjects", crb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "lab-conformance", Namespace: namespace}})
		r.find(t, "ClusterRole", "lab-conformance")
	})
}

// TestConformanceRoleKeepsReasons: each rule of the chart's copy of the
// suite's ClusterRole keeps, as a comment, the reason
// conformance/config/clusterrole.yaml gives for it.
func TestConformanceRoleKeepsReasons(t *testing.T) {
	shipped, err := os.ReadFile(repo("conformance", "config", "clusterrole.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(chartDir, "templates", "conformance-runner.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The header lists them as "#   <group> <resource> [<verbs>]: <why>".
	n := 0
	for _, line := range strings.Split(string(shipped), "\n") {
		rest, ok := strings.CutPrefix(line, "#   ")
		if !ok {
			continue
		}
		_, why, ok := strings.Cut(rest, "]: ")
		if !ok {
			continue
		}
		n++
		if !strings.Contains(string(tmpl), "  # "+why+"\n") {
			t.Errorf("the chart's ClusterRole has no comment %q (from %s)", why, strings.TrimSpace(rest))
		}
	}
	if want := len(decodeFile(t, repo("conformance", "config", "clusterrole.yaml"))[0].Object["rules"].([]any)); n != want {
		t.Errorf("found %d reasons in clusterrole.yaml's header for %d rules: the header's format changed", n, want)
	}
}

// restricted fails the test for each of the pod's restrictedViolations.
func restricted(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	for _, v := range restrictedViolations(pod) {
		t.Errorf("%s: %s", pod.Name, v)
	}
}

// restrictedViolations are the pod's breaches of the restricted Pod
// Security level's checks that a rendered pod can fail: host namespaces or
// paths, root, a seccomp profile other than RuntimeDefault or Localhost,
// privilege escalation, capabilities kept (NET_BIND_SERVICE alone may be
// added).
func restrictedViolations(pod *corev1.Pod) []string {
	var out []string
	ps := pod.Spec
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		out = append(out, "shares a host namespace")
	}
	for _, v := range ps.Volumes {
		if v.EmptyDir == nil && v.ConfigMap == nil && v.Secret == nil && v.Projected == nil && v.DownwardAPI == nil &&
			v.PersistentVolumeClaim == nil && v.CSI == nil && v.Ephemeral == nil {
			out = append(out, "volume "+v.Name+" is of a type the restricted level forbids")
		}
	}
	psc := ps.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range append(slices.Clone(ps.InitContainers), ps.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			out = append(out, c.Name+" has no securityContext")
			continue
		}
		nonRoot := psc.RunAsNonRoot
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			out = append(out, c.Name+" may run as root (runAsNonRoot unset or false)")
		}
		for _, uid := range []*int64{psc.RunAsUser, sc.RunAsUser} {
			if uid != nil && *uid == 0 {
				out = append(out, c.Name+" runs as UID 0")
			}
		}
		seccomp := psc.SeccompProfile
		if sc.SeccompProfile != nil {
			seccomp = sc.SeccompProfile
		}
		if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
			out = append(out, c.Name+": seccomp profile not RuntimeDefault or Localhost")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			out = append(out, c.Name+" may escalate privileges")
		}
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, c.Name+" is privileged")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			out = append(out, c.Name+" does not drop ALL capabilities")
		} else if slices.ContainsFunc(sc.Capabilities.Add, func(c corev1.Capability) bool { return c != "NET_BIND_SERVICE" }) {
			out = append(out, c.Name+" adds capabilities")
		}
	}
	return out
}

// TestRestrictedCanFail: restrictedViolations catches each thing it checks.
func TestRestrictedCanFail(t *testing.T) {
	var good corev1.Pod
	into(t, render(t, loadChart(t), values(t, "conformanceRunner: {enabled: true}")).find(t, "Pod", conformanceTest), &good)
	restricted(t, &good)
	for name, spoil := range map[string]func(*corev1.Pod){
		"root allowed":         func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsNonRoot = nil },
		"UID 0":                func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.RunAsUser = new(int64) },
		"no seccomp":           func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil },
		"privilege escalation": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil },
		"capabilities kept":    func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities = nil },
		"capability added": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		},
		"host network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"hostPath": func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		},
	} {
		p := good.DeepCopy()
		spoil(p)
		if len(restrictedViolations(p)) == 0 {
			t.Errorf("%s: no violation found", name)
		}
	}
}
