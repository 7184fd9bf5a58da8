// Package rbac is the suite's least privilege on a cluster: the rules of the
// gpulab-conformance ClusterRole (shipped as conformance/config, generated
// from Rules), the ValidatingAdmissionPolicy that confines what RBAC
// cannot (AdmissionPolicy), and a preflight that asks the API server, with
// SelfSubjectAccessReviews, whether the caller holds each rule
// (Check) and whether the policy confines it (CheckConfinement).
//
// The suite creates a namespace per scenario, so what it does to pods and
// its workloads it does in namespaces it cannot name in advance: the rules
// are cluster-wide. RBAC cannot select namespaces by label; the policy
// can: it lets the runner create namespaces only with the run's label and
// restricted Pod Security, delete only those, and create or delete pods
// only there (as the default ServiceAccount, nothing privileged, nothing
// of the node's), and create or delete resource quotas only there. The suite never updates or patches anything: every
// object it changes it created, and it only creates and deletes. Checks
// that only the local testbed runs (XID injection annotates nodes) are not
// in the rules.
package rbac

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/schedconf"
)

// Name names the ClusterRole, its binding, the admission policy and its
// binding, the ServiceAccount and the runner's namespace.
const Name = "gpulab-conformance"

// KubeRayDeployment is the name KubeRay's operator Deployment has in its
// Helm chart (release kuberay-operator) and kustomize config: the one
// Deployment the suite may read, to check its --batch-scheduler flag.
const KubeRayDeployment = "kuberay-operator"

// Rule is one resource's verbs, and why the suite needs them.
type Rule struct {
	Group, Resource string
	Verbs           []string
	Why             string
	// ResourceNames limits the rule to these objects, where it may.
	ResourceNames []string
}

var (
	read   = []string{"get", "list", "watch"}
	manage = []string{"get", "list", "watch", "create", "delete"}
)

// Rules are what the suite does on a cluster, whatever its flags (the
// workload's kinds are all listed: a reviewed role should not change with
// --workload).
func Rules() []Rule {
	return []Rule{
		{"", "namespaces", manage, "a namespace per scenario, deleted after; --namespace is read (the admission policy: only the run's, restricted)", nil},
		{"", "pods", manage, "probe and filler pods; the run's pods counted and waited for; the operator's leader found and, with --disruptive, force-deleted (the admission policy: only in the run's namespaces, unprivileged)", nil},
		{"", "nodes", read, "the GPU pool: allocatable, cordons, labels", nil},
		{"", "resourcequotas", []string{"get", "create", "delete"}, "with --disruptive, a pod quota holds the failover gang half-made while the operator's leader is killed (the admission policy: only in the run's namespaces)", nil},
		{"gpulab.io", "gpuclusters", manage, "the gangs of --workload=gpucluster and the invalid ones the API must refuse", nil},
		{"gpulab.io", "gpujobs", manage, "the job feature", nil},
		{"gpulab.io", "gpuinventories", read, "the inventory feature", nil},
		{"scheduling.volcano.sh", "podgroups", read, "each gang's PodGroup and the scheduler's verdict on it", nil},
		{"scheduling.k8s.io", "podgroups", read, "each gang's PodGroup and kube-scheduler's verdict on it, with --scheduler=kubernetes", nil},
		{"scheduling.volcano.sh", "queues", []string{"get", "list", "create", "delete"}, "the run's queue, capped at --max-gpus; --queue is read", nil},
		{"batch.volcano.sh", "jobs", manage, "the gangs of --workload=vcjob", nil},
		{"ray.io", "rayclusters", manage, "the gangs of --workload=raycluster", nil},
		{"resource.k8s.io", "deviceclasses", []string{"get"}, "the dra feature's --device-class and its selectors", nil},
		{"resource.k8s.io", "resourceslices", []string{"list"}, "the devices the class selects, by node-local pool", nil},
		{"resource.k8s.io", "resourceclaims", []string{"get", "list", "watch"}, "which devices claims hold: none may be held twice, watched the whole run", nil},
		{"resource.k8s.io", "resourceclaimtemplates", manage, "the dra feature's claims, one template per pod", nil},
		{"karpenter.sh", "nodepools", []string{"get", "list"}, "the autoscaling feature: which NodePool may add GPU nodes, its limits and consolidateAfter", nil},
		{"karpenter.sh", "nodeclaims", []string{"list"}, "the autoscaling feature: the nodes Karpenter is adding, before they register", nil},
		{"apiextensions.k8s.io", "customresourcedefinitions", []string{"get"}, "which of gpulab's, Volcano's and KubeRay's APIs the cluster serves", nil},
		{"apps", "deployments", []string{"list"}, "KubeRay's operator and its --batch-scheduler flag (listed by name)", []string{KubeRayDeployment}},
		{"coordination.k8s.io", "leases", []string{"get", "create", "update", "delete"},
			"who leads the operator (--operator-namespace); the cluster's run lock and this run's marker, taken, renewed and released (conformance/runlock; the admission policy keeps writes to those two in --lock-namespace)", nil},
		{"", "configmaps", []string{"get"}, "Volcano's scheduler configuration: with reclaim or preempt on, over-capacity scenarios need --disruptive",
			[]string{schedconf.ConfigMapName}},
	}
}

// ClusterRole is the role the rules make.
func ClusterRole() *rbacv1.ClusterRole {
	cr := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: map[string]string{"app.kubernetes.io/name": Name}},
	}
	for _, r := range Rules() {
		cr.Rules = append(cr.Rules, rbacv1.PolicyRule{APIGroups: []string{r.Group}, Resources: []string{r.Resource}, Verbs: r.Verbs, ResourceNames: r.ResourceNames})
	}
	return cr
}

// Missing is one verb on one resource the caller may not use.
type Missing struct {
	Verb string
	Rule Rule
	// Reason is the authorizer's, when it gave one.
	Reason string
}

func (m Missing) String() string {
	res := m.Rule.Resource
	if m.Rule.Group != "" {
		res += "." + m.Rule.Group
	}
	s := fmt.Sprintf("%s %s (%s)", m.Verb, res, m.Rule.Why)
	if m.Reason != "" {
		s += ": " + m.Reason
	}
	return s
}

// Check asks, verb by verb, whether the caller may do what rules say,
// cluster-wide. It returns what is denied; an error only when the API
// server could not answer.
func Check(ctx context.Context, c client.Client, rules []Rule) ([]Missing, error) {
	var missing []Missing
	for _, r := range rules {
		resource, sub, _ := strings.Cut(r.Resource, "/")
		name := ""
		if len(r.ResourceNames) > 0 {
			name = r.ResourceNames[0]
		}
		for _, verb := range r.Verbs {
			ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: r.Group, Resource: resource, Subresource: sub, Verb: verb, Name: name},
			}}
			if err := c.Create(ctx, ssar); err != nil {
				return nil, fmt.Errorf("asking the API server whether this user may %s %s: %w", verb, r.Resource, err)
			}
			if !ssar.Status.Allowed {
				missing = append(missing, Missing{Verb: verb, Rule: r, Reason: ssar.Status.Reason})
			}
		}
	}
	return missing, nil
}

// Verbs counts the verbs of rules: the checks Check makes.
func Verbs(rules []Rule) int {
	n := 0
	for _, r := range rules {
		n += len(r.Verbs)
	}
	return n
}
