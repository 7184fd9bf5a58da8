package rbac

import (
	"bytes"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/conformance/cleanup"
)

const (
	shippedPolicy = "../config/admission-policy.yaml"
	chartPolicy   = "../../charts/gpulab/templates/conformance-admission-policy.yaml"
)

const policyHeader = `# Generated from conformance/rbac (go test ./conformance/rbac/ -update): do not edit.
# The admission policy beside the gpulab-conformance ClusterRole: RBAC lets
# the runner create and delete namespaces and pods anywhere (it cannot
# select by label); this keeps the runner's ServiceAccount to namespaces
# labelled ` + RunLabel + ` (created with restricted Pod Security),
# to pods there that run as the default ServiceAccount with nothing
# privileged and nothing of the node's, to its own pods in a namespace
# its owner labelled ` + GuestLabel + `=true (--namespace), and to
# deleting gpulab-operator pods in the operator's namespace (--disruptive).
# Needs Kubernetes 1.30 (admissionregistration.k8s.io/v1).
`

// spec is the YAML of an object's spec alone, indented by two spaces,
// each CEL expression double-quoted so that its own quotes read as written.
func spec(t *testing.T, o any) string {
	t.Helper()
	out, err := yaml.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	out, err = yaml.Marshal(m["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var n yamlv3.Node
	if err := yamlv3.Unmarshal(out, &n); err != nil {
		t.Fatal(err)
	}
	quoteCEL(&n)
	var b bytes.Buffer
	enc := yamlv3.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		t.Fatal(err)
	}
	return "  " + strings.ReplaceAll(strings.TrimSuffix(b.String(), "\n"), "\n", "\n  ") + "\n"
}

// quoteCEL double-quotes the values of expression keys.
func quoteCEL(n *yamlv3.Node) {
	for i, c := range n.Content {
		if n.Kind == yamlv3.MappingNode && i%2 == 1 && n.Content[i-1].Value == "expression" {
			c.Style = yamlv3.DoubleQuotedStyle
		}
		quoteCEL(c)
	}
}

// object is the YAML of a policy object: what metadata says, then its spec.
func object(t *testing.T, kind, metadata, s string) string {
	return "apiVersion: admissionregistration.k8s.io/v1\nkind: " + kind + "\nmetadata:\n" + metadata + "spec:\n" + s
}

// admissionPolicyYAML is conformance/config/admission-policy.yaml.
func admissionPolicyYAML(t *testing.T) []byte {
	meta := "  labels:\n    app.kubernetes.io/name: " + Name + "\n  name: " + Name + "\n"
	return []byte(policyHeader +
		object(t, "ValidatingAdmissionPolicy", meta, spec(t, AdmissionPolicy(Confinement{}))) + "---\n" +
		object(t, "ValidatingAdmissionPolicyBinding", meta, spec(t, AdmissionPolicyBinding(Confinement{}))))
}

// chartAdmissionPolicyYAML is the chart's template: the same policy for
// the release's runner ServiceAccount, with the operator in the release
// namespace.
func chartAdmissionPolicyYAML(t *testing.T) []byte {
	c := Confinement{Name: "{{ $name }}", User: ServiceAccountUser("{{ .Release.Namespace }}", "{{ $name }}"), OperatorNamespace: "{{ .Release.Namespace }}"}
	meta := "  name: {{ $name }}\n  labels:\n    {{- include \"gpulab.conformance.labels\" . | nindent 4 }}\n"
	return []byte("{{- if .Values.conformanceRunner.enabled }}\n{{- $name := include \"gpulab.conformance.fullname\" . }}\n" +
		strings.Replace(policyHeader, "(go test", "as conformance/config/admission-policy.yaml, for the release's runner\n# (go test", 1) +
		object(t, "ValidatingAdmissionPolicy", meta, spec(t, AdmissionPolicy(c))) + "---\n" +
		object(t, "ValidatingAdmissionPolicyBinding", meta, spec(t, AdmissionPolicyBinding(c))) + "{{- end }}\n")
}

func TestShippedAdmissionPolicyIsGenerated(t *testing.T) {
	golden(t, shippedPolicy, admissionPolicyYAML(t))
	golden(t, chartPolicy, chartAdmissionPolicyYAML(t))
}

// The policy reads the label the run really puts on what it creates.
func TestRunLabelIsCleanups(t *testing.T) {
	if RunLabel != cleanup.RunIDLabel || !strings.Contains(string(admissionPolicyYAML(t)), "'"+cleanup.RunIDLabel+"'") {
		t.Errorf("the policy's run label %q is not the run's, %q", RunLabel, cleanup.RunIDLabel)
	}
}

// The policy confines exactly the runner's ServiceAccount, and checks the
// pods' every kind of container.
func TestAdmissionPolicyShape(t *testing.T) {
	p := AdmissionPolicy(Confinement{User: "system:serviceaccount:ns:sa", OperatorNamespace: "ops"})
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != "request.userInfo.username == 'system:serviceaccount:ns:sa'" {
		t.Errorf("match conditions %+v: want the runner's user alone", p.Spec.MatchConditions)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != "Fail" {
		t.Error("the policy does not fail closed")
	}
	var all bytes.Buffer
	for _, v := range p.Spec.Validations {
		all.WriteString(v.Expression + "\n")
	}
	for _, v := range p.Spec.Variables {
		all.WriteString(v.Expression + "\n")
	}
	for _, want := range append(podFields, "hostPath", "hostNetwork", "hostPID", "hostIPC", "privileged", "capabilities.?add",
		"serviceAccountName", "'ops'", "oldObject", "namespaceObject", "'"+EnforceLabel+"'", "'"+GuestLabel+"'") {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the policy never reads %s", want)
		}
	}
	if b := AdmissionPolicyBinding(Confinement{}); b.Spec.PolicyName != Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != "Deny" {
		t.Errorf("binding %+v: want policy %s, Deny", b.Spec, Name)
	}
}
