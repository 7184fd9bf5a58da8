package rbac

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/runlock"
)

// What the admission policy reads on namespaces and pods.
const (
	// RunLabel marks everything a run creates (cleanup.RunIDLabel): the
	// policy lets the runner reach only namespaces that carry it.
	RunLabel = cleanup.RunIDLabel
	// GuestLabel, set to "true" by the cluster's owner on a namespace
	// (the one given to --namespace), lets the runner create its own
	// pods there and delete them: pods with RunLabel, confined like the
	// rest. The runner cannot set it: it never updates a namespace, and
	// one it creates is its own anyway.
	GuestLabel = "conformance.gpulab.io/guest"
	// EnforceLabel is Pod Security admission's; every namespace the
	// runner creates must enforce the restricted level.
	EnforceLabel = "pod-security.kubernetes.io/enforce"
	// markerPrefix starts every run marker's name (runlock.MarkerName).
	markerPrefix = runlock.LockName + "-run-"
	// DefaultOperatorNamespace is where conformance/config expects
	// gpulab's operator (operator/config/default's namespace).
	DefaultOperatorNamespace = "gpulab-system"
	// operatorNameLabel is on the operator's pods, in kustomize and the
	// chart alike: with --disruptive the runner deletes the leader's.
	operatorNameLabel = "app.kubernetes.io/name"
	operatorName      = "gpulab-operator"
)

// Confinement says whom the admission policy confines.
type Confinement struct {
	// Name names the policy and its binding. Defaults to Name.
	Name string
	// User is the runner's user name. Defaults to the ServiceAccount
	// Name in the namespace Name (conformance/config's).
	User string
	// OperatorNamespace is where, with --disruptive, the runner may
	// delete gpulab operator pods (to kill the leader). Defaults to
	// DefaultOperatorNamespace.
	OperatorNamespace string
	// LockNamespace holds the run lock and the runs' markers (Leases,
	// --lock-namespace): the only Leases the runner may write. Defaults
	// to runlock.DefaultNamespace.
	LockNamespace string
}

func (c Confinement) withDefaults() Confinement {
	if c.Name == "" {
		c.Name = Name
	}
	if c.User == "" {
		c.User = ServiceAccountUser(Name, Name)
	}
	if c.OperatorNamespace == "" {
		c.OperatorNamespace = DefaultOperatorNamespace
	}
	if c.LockNamespace == "" {
		c.LockNamespace = runlock.DefaultNamespace
	}
	return c
}

// ServiceAccountUser is the user name a ServiceAccount's token carries.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// check is one validation of the policy: what must hold, and why.
type check struct{ expr, message string }

// podFields are the lists of containers a pod spec has: the policy checks
// each (CEL cannot concatenate them, their types differ).
var podFields = []string{"containers", "initContainers", "ephemeralContainers"}

// checks are the policy's validations. RBAC grants creating and deleting
// namespaces and pods cluster-wide (it cannot select by label); these
// keep that to the run's own namespaces and to pods that cannot reach
// the node or another identity.
func (c Confinement) checks() []check {
	q := func(s string) string { return "'" + s + "'" }
	everyContainer := func(pred string) string {
		var all []string
		for _, f := range podFields {
			all = append(all, "object.spec.?"+f+".orValue([]).all(c, "+pred+")")
		}
		return strings.Join(all, " && ")
	}
	podCreate := "!variables.podCreate || "
	return []check{
		{"!variables.namespaceCreate || variables.labels[?" + q(RunLabel) + "].orValue('') != ''",
			"the conformance runner may only create namespaces labelled " + RunLabel},
		{"!variables.namespaceCreate || variables.labels[?" + q(EnforceLabel) + "].orValue('') == 'restricted'",
			"the conformance runner may only create namespaces labelled " + EnforceLabel + "=restricted"},
		{"!variables.namespaceDelete || variables.labels[?" + q(RunLabel) + "].orValue('') != ''",
			"the conformance runner may only delete namespaces labelled " + RunLabel},
		{"!variables.isPod || variables.runNamespace || variables.guestNamespace && variables.ownPod || variables.operatorPod",
			"the conformance runner may only create or delete pods in namespaces labelled " + RunLabel +
				", its own pods (labelled " + RunLabel + ") in a namespace labelled " + GuestLabel + "=true, and delete " +
				operatorName + " pods in " + c.OperatorNamespace},
		{"!variables.isQuota || variables.runNamespace",
			"the conformance runner may only create or delete resource quotas in namespaces labelled " + RunLabel},
		{podCreate + "object.spec.?serviceAccountName.orValue('') in ['', 'default'] && object.spec.?serviceAccount.orValue('') in ['', 'default']",
			"the conformance runner's pods run as the default ServiceAccount"},
		{podCreate + "!object.spec.?hostNetwork.orValue(false) && !object.spec.?hostPID.orValue(false) && !object.spec.?hostIPC.orValue(false)",
			"the conformance runner's pods may not share the node's network, PID or IPC namespace"},
		{podCreate + "object.spec.?volumes.orValue([]).all(v, !has(v.hostPath))",
			"the conformance runner's pods may not mount hostPath volumes"},
		{podCreate + "(" + everyContainer("!c.?securityContext.?privileged.orValue(false)") + ")",
			"the conformance runner's containers may not be privileged"},
		{podCreate + "(" + everyContainer("size(c.?securityContext.?capabilities.?add.orValue([])) == 0") + ")",
			"the conformance runner's containers may not add capabilities"},
		// Its role writes Leases anywhere (RBAC cannot name a marker it has
		// not made yet): only the run lock and the markers, never another
		// component's leader election.
		{"!variables.isLease || request.namespace == " + q(c.LockNamespace) + " && (request.name == " + q(runlock.LockName) +
			" && variables.labels[?" + q(runlock.LockLabel) + "].orValue('') != '' || request.name.startsWith(" + q(markerPrefix) +
			") && variables.labels[?" + q(runlock.MarkerLabel) + "].orValue('') != '')",
			"the conformance runner may only write its run lock (Lease " + runlock.LockName + ", labelled " + runlock.LockLabel +
				") and its runs' markers (Leases " + markerPrefix + "*, labelled " + runlock.MarkerLabel + ") in namespace " + c.LockNamespace},
	}
}

// AdmissionPolicy confines what the runner's ServiceAccount does with the
// namespaces, pods and resource quotas its role lets it create and delete
// anywhere.
func AdmissionPolicy(c Confinement) *admissionregistrationv1.ValidatingAdmissionPolicy {
	c = c.withDefaults()
	fail := admissionregistrationv1.Fail
	forbidden := metav1.StatusReasonForbidden
	q := func(s string) string { return "'" + s + "'" }
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Labels: map[string]string{"app.kubernetes.io/name": Name}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"*"}, Resources: []string{"namespaces", "pods", "resourcequotas"}},
				},
			}, {
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "is-the-conformance-runner",
				Expression: "request.userInfo.username == " + q(c.User)}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "isPod", Expression: "request.resource.resource == 'pods'"},
				{Name: "isLease", Expression: "request.resource.resource == 'leases'"},
				{Name: "isQuota", Expression: "request.resource.resource == 'resourcequotas'"},
				{Name: "podCreate", Expression: "variables.isPod && request.operation == 'CREATE'"},
				{Name: "namespaceCreate", Expression: "request.resource.resource == 'namespaces' && request.operation == 'CREATE'"},
				{Name: "namespaceDelete", Expression: "request.resource.resource == 'namespaces' && request.operation == 'DELETE'"},
				// The object's labels: the old object's on DELETE, which has no new one.
				{Name: "labels", Expression: "request.operation == 'DELETE' ? oldObject.metadata.?labels.orValue({}) : object.metadata.?labels.orValue({})"},
				{Name: "namespaceLabels", Expression: "variables.isPod || variables.isQuota ? namespaceObject.metadata.?labels.orValue({}) : {}"},
				{Name: "runNamespace", Expression: "variables.namespaceLabels[?" + q(RunLabel) + "].orValue('') != ''"},
				{Name: "guestNamespace", Expression: "variables.namespaceLabels[?" + q(GuestLabel) + "].orValue('') == 'true'"},
				{Name: "ownPod", Expression: "variables.labels[?" + q(RunLabel) + "].orValue('') != ''"},
				// --disruptive kills the operator's leader by deleting its pod.
				{Name: "operatorPod", Expression: "variables.isPod && request.operation == 'DELETE' && request.namespace == " + q(c.OperatorNamespace) +
					" && variables.labels[?" + q(operatorNameLabel) + "].orValue('') == " + q(operatorName)},
			},
		},
	}
	for _, ch := range c.checks() {
		p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: ch.expr, Message: ch.message, Reason: &forbidden})
	}
	return p
}

// AdmissionPolicyBinding puts AdmissionPolicy in force, denying what it
// refuses.
func AdmissionPolicyBinding(c Confinement) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	c = c.withDefaults()
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Labels: map[string]string{"app.kubernetes.io/name": Name}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        c.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

// PolicyAPI is the API the policy needs: GA in Kubernetes 1.30.
const PolicyAPI = "admissionregistration.k8s.io/v1"

// preflightNamespace is the name of the namespace CheckConfinement asks,
// in a dry run, to create without the run's label.
const preflightNamespace = Name + "-preflight"

// CheckConfinement checks, for a caller that is a ServiceAccount (the
// in-cluster runner), that the cluster serves ValidatingAdmissionPolicy
// v1 and that a policy confines it: a server-side dry run of what the
// policy refuses (a namespace without the run's label) must be refused
// by one. It asks the API server rather than reading the policy by name,
// since names differ between conformance/config and a Helm release and a
// policy only confines once its binding matches and the server loaded it.
// A person's own credentials are not the runner's; for them it only
// says what it found. It returns a line for the dry run's report, and an
// error when the runner is not confined (or the server did not answer).
func CheckConfinement(ctx context.Context, c client.Client, dc discovery.DiscoveryInterface) (string, error) {
	served, err := servesPolicies(dc)
	if err != nil {
		return "", err
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("asking the API server who this user is: %w", err)
	}
	user := review.Status.UserInfo.Username
	if !strings.HasPrefix(user, "system:serviceaccount:") {
		if !served {
			return fmt.Sprintf("%s is not a ServiceAccount; the cluster does not serve %s ValidatingAdmissionPolicies (Kubernetes 1.30 or later), which the in-cluster runner needs", user, PolicyAPI), nil
		}
		return fmt.Sprintf("%s is not a ServiceAccount: the runner's admission policy (conformance/config/admission-policy.yaml) confines only the runner", user), nil
	}
	if !served {
		return "", fmt.Errorf("preflight: the cluster does not serve %s ValidatingAdmissionPolicies (Kubernetes 1.30 or later): "+
			"%s would run with its role alone, without the %s policy (conformance/config/admission-policy.yaml) that keeps its pods and namespaces to its own run; "+
			"upgrade the cluster, or run the suite with your own credentials", PolicyAPI, user, Name)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: preflightNamespace}}
	err = c.Create(ctx, ns, client.DryRunAll)
	switch {
	case err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		return fmt.Sprintf("%s is confined by a ValidatingAdmissionPolicy (%s)", user, policyOf(err)), nil
	case err == nil, apierrors.IsAlreadyExists(err):
		return "", fmt.Errorf("preflight: %s is not confined: no ValidatingAdmissionPolicy refused it a namespace without %s; "+
			"install the %s ValidatingAdmissionPolicy and its binding (conformance/config/admission-policy.yaml, or the chart's) for this ServiceAccount "+
			"(one installed moments ago may not be loaded yet)", user, RunLabel, Name)
	default:
		return "", fmt.Errorf("checking that an admission policy confines %s (a dry-run create of namespace %s): %w", user, preflightNamespace, err)
	}
}

// servesPolicies says whether the API server serves ValidatingAdmissionPolicy v1.
func servesPolicies(dc discovery.DiscoveryInterface) (bool, error) {
	list, err := dc.ServerResourcesForGroupVersion(PolicyAPI)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking the API server whether it serves %s: %w", PolicyAPI, err)
	}
	for _, r := range list.APIResources {
		if r.Name == "validatingadmissionpolicies" {
			return true, nil
		}
	}
	return false, nil
}

// policyOf is the "ValidatingAdmissionPolicy 'p' with binding 'b'" part of
// a denial, which names what confines the caller.
func policyOf(err error) string {
	msg := err.Error()
	i := strings.Index(msg, "ValidatingAdmissionPolicy")
	if i < 0 {
		return ""
	}
	msg = msg[i:]
	if j := strings.Index(msg, " denied"); j > 0 {
		msg = msg[:j]
	}
	return msg
}
