package selftest

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/probe"
	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/conformance/runlock"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/internal/poll/polltest"
	"github.com/gpulab/gpulab/testbeds/local"
)

// runnerConfig is a config for the shipped runner's ServiceAccount, under
// conformance/config's objects, applied.
func runnerConfig(t *testing.T) *rest.Config {
	t.Helper()
	applyShipped(t, api.Client)
	cfg, err := api.AsUser(rbac.ServiceAccountUser(rbac.Name, rbac.Name), "system:serviceaccounts", "system:serviceaccounts:"+rbac.Name, "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// refusedByPolicy says whether err is the runner's admission policy's
// refusal, and not RBAC's or Pod Security's.
func refusedByPolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+rbac.Name+"'")
}

// waitConfined polls until the API server has loaded the shipped policy:
// a dry-run namespace without the run's label is refused by it.
func waitConfined(t *testing.T, cfg *rest.Config) {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: local.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	err = poll.Until(context.Background(), time.Minute, func() (bool, string) {
		err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpulab-conformance-unlabelled"}}, client.DryRunAll)
		if refusedByPolicy(err) {
			return true, ""
		}
		return false, "a namespace without the run label: " + errString(err)
	})
	if err != nil {
		t.Fatalf("the shipped admission policy never confined the runner: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}

// pod is a pod restricted Pod Security admits, as the runner's probes
// are, with the run's label.
func pod(name string) *corev1.Pod {
	p := probe.Pod(probe.Spec{Name: name, Node: "gpu-0", Image: "busybox"})
	p.Labels = map[string]string{rbac.RunLabel: "confined"}
	return p
}

// podQuota is a quota of one pod in ns, as the controller feature's
// failover sets one.
func podQuota(ns string) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "confined-hold"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
}

// TestTheRunnerIsConfined impersonates the runner's ServiceAccount under
// exactly conformance/config's objects and tries what a stolen token
// would: each is refused, by the admission policy where RBAC cannot say
// (the namespaces here carry no Pod Security labels unless said, so no
// other admission refuses for it), by RBAC where it can. What the suite
// does must still work.
func TestTheRunnerIsConfined(t *testing.T) {
	if api == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	cfg := runnerConfig(t)
	c, err := client.New(cfg, client.Options{Scheme: local.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	admin := api.Client
	runLabels := map[string]string{rbac.RunLabel: "confined"}
	// A run's namespace made by an admin without Pod Security, so that
	// only the policy can refuse a privileged pod there; a namespace its
	// owner lent the runner (--namespace); one nobody lent it.
	for name, labels := range map[string]map[string]string{
		"confined-run":   runLabels,
		"confined-guest": {rbac.GuestLabel: "true"},
		"confined-other": nil,
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if err := admin.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		// The API server is shared with the package's other tests, which
		// check that a run leaves nothing with a run label behind.
		t.Cleanup(func() { _ = admin.Delete(context.Background(), ns) })
	}
	// The kubelets' leases' namespace, as every cluster has it.
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-node-lease"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Every ServiceAccount named exists, so the ServiceAccount admission
	// plugin refuses nothing for want of one.
	for _, sa := range []client.ObjectKey{{Namespace: "confined-run", Name: "default"}, {Namespace: "confined-run", Name: "powerful"},
		{Namespace: "confined-guest", Name: "default"}, {Namespace: "kube-system", Name: "default"}, {Namespace: operatorNamespace, Name: "default"}} {
		if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "confined-secretish"}, Data: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	waitConfined(t, cfg)

	// refused checks the policy refused, for the reason given (a
	// policy that fails to evaluate refuses too, for none).
	refused := func(what, why string, err error) {
		t.Helper()
		if !refusedByPolicy(err) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %s, want the %s admission policy's refusal: %s", what, errString(err), rbac.Name, why)
		}
	}
	const (
		where      = "may only create or delete pods in namespaces labelled"
		privileged = "may not be privileged"
	)
	create := func(ns string, p *corev1.Pod) error {
		p.Namespace = ns
		return c.Create(ctx, p)
	}

	t.Run("refused", func(t *testing.T) {
		refused("a pod in kube-system", where, create("kube-system", pod("in-kube-system")))
		refused("a pod in a namespace nobody lent it", where, create("confined-other", pod("elsewhere")))
		p := pod("privileged")
		// The API refuses privileged with allowPrivilegeEscalation false.
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		refused("a privileged pod in a run's namespace", privileged, create("confined-run", p))
		p = pod("privileged-init")
		p.Spec.InitContainers = []corev1.Container{*p.Spec.Containers[0].DeepCopy()}
		p.Spec.InitContainers[0].Name = "init"
		p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{Privileged: new(true)}
		refused("a privileged init container", privileged, create("confined-run", p))
		p = pod("caps")
		p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		refused("a pod adding a capability", "may not add capabilities", create("confined-run", p))
		p = pod("hostpath")
		p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}
		refused("a hostPath pod", "may not mount hostPath", create("confined-run", p))
		p = pod("hostnet")
		p.Spec.HostNetwork = true
		refused("a hostNetwork pod", "may not share the node's network", create("confined-run", p))
		p = pod("hostpid")
		p.Spec.HostPID = true
		refused("a hostPID pod", "may not share the node's network", create("confined-run", p))
		p = pod("other-sa")
		p.Spec.ServiceAccountName = "powerful"
		refused("a pod as another ServiceAccount", "run as the default ServiceAccount", create("confined-run", p))
		p = pod("guest-unlabelled")
		p.Labels = nil
		refused("a pod without the run label in a lent namespace", where, create("confined-guest", p))

		refused("a namespace without the run label", "may only create namespaces labelled "+rbac.RunLabel, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "confined-bare",
			Labels: map[string]string{rbac.EnforceLabel: "restricted"}}}))
		refused("a run's namespace without restricted Pod Security", "may only create namespaces labelled "+rbac.EnforceLabel, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "confined-privileged",
			Labels: map[string]string{rbac.RunLabel: "confined", rbac.EnforceLabel: "privileged"}}}))
		// The API server keeps kube-system itself (NamespaceLifecycle
		// refuses before any policy is asked); the policy refuses the rest.
		if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}); !apierrors.IsForbidden(err) {
			t.Errorf("deleting kube-system: %s, want Forbidden", errString(err))
		}
		refused("deleting kube-node-lease", "may only delete namespaces labelled", c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-node-lease"}}))
		refused("deleting a namespace without the run label", "may only delete namespaces labelled", c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "confined-other"}}))

		// The failover's pod quota: only in a run's namespace, where it
		// can hold back nobody's pods but the run's.
		const quotaRefusal = "may only create or delete resource quotas in namespaces labelled " + rbac.RunLabel
		refused("a resource quota in kube-system", quotaRefusal, c.Create(ctx, podQuota("kube-system")))
		refused("a resource quota in a lent namespace", quotaRefusal, c.Create(ctx, podQuota("confined-guest")))
		othersQuota := podQuota("confined-other")
		if err := admin.Create(ctx, othersQuota); err != nil {
			t.Fatal(err)
		}
		refused("deleting a resource quota in a namespace nobody lent it", quotaRefusal, c.Delete(ctx, othersQuota))

		// A pod of gpulab-system that is not the operator's.
		other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "confined-not-operator"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if err := admin.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		refused("deleting a pod in the operator's namespace that is not the operator's", where, c.Delete(ctx, other))

		// Leases: the role writes them anywhere, the policy only the run
		// lock and the markers in the lock namespace.
		lease := func(ns, name string, labels map[string]string) *coordinationv1.Lease {
			return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
		}
		const leaseRefusal = "may only write its run lock"
		refused("a leader-election Lease in kube-system", leaseRefusal, c.Create(ctx, lease("kube-system", "kube-scheduler", nil)))
		refused("the run lock's name in kube-system", leaseRefusal, c.Create(ctx, lease("kube-system", runlock.LockName, map[string]string{runlock.LockLabel: "true"})))
		refused("an unlabelled Lease named like the lock", leaseRefusal, c.Create(ctx, lease(runlock.DefaultNamespace, runlock.LockName, nil)))
		refused("another Lease in the lock namespace", leaseRefusal, c.Create(ctx, lease(runlock.DefaultNamespace, "gpulab-operator-leader", map[string]string{runlock.LockLabel: "true"})))
		foreign := lease(runlock.DefaultNamespace, "confined-foreign", nil)
		if err := admin.Create(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		refused("deleting another component's Lease", leaseRefusal, c.Delete(ctx, foreign))

		// RBAC's refusals: what the role does not grant.
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "confined-secretish"}, &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
			t.Errorf("reading a ConfigMap in kube-system: %s, want Forbidden", errString(err))
		}
		if err := c.List(ctx, &appsv1.DeploymentList{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing Deployments cluster-wide: %s, want Forbidden", errString(err))
		}
		ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: "kube-system", Verb: "get", Resource: "pods", Subresource: "log"}}}
		if err := c.Create(ctx, ssar); err != nil || ssar.Status.Allowed {
			t.Errorf("may read pod logs in kube-system: %t (%v), want not", ssar.Status.Allowed, err)
		}
	})

	t.Run("allowed", func(t *testing.T) {
		// The run's own namespace, restricted, as the suite creates it:
		// Pod Security admission enforces restricted there, and the
		// probes pass it.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "confined-scenario",
			Labels: map[string]string{rbac.RunLabel: "confined", rbac.EnforceLabel: "restricted"}}}
		if err := c.Create(ctx, ns); err != nil {
			t.Fatalf("creating a run's restricted namespace: %v", err)
		}
		if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		for _, p := range []*corev1.Pod{
			probe.Pod(probe.Spec{Name: "smi-query", Node: "gpu-0", GPUs: 1, Image: "cuda"}),
			probe.Pod(probe.Spec{Name: "smi-none", Node: "gpu-0", Image: "cuda"}),
			probe.Pod(probe.Spec{Name: "smi-hold", Node: "gpu-0", GPUs: 1, Hold: time.Minute, Image: "cuda"}),
		} {
			p.Labels = runLabels
			if err := create(ns.Name, p); err != nil {
				t.Errorf("creating probe %s in a run's restricted namespace: %v", p.Name, err)
				continue
			}
			if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
				t.Errorf("deleting probe %s: %v", p.Name, err)
			}
		}
		own := pod("guest-own")
		if err := create("confined-guest", own); err != nil {
			t.Errorf("creating its own pod in a lent namespace: %v", err)
		} else if err := c.Delete(ctx, own); err != nil {
			t.Errorf("deleting its own pod in a lent namespace: %v", err)
		}
		// --disruptive's failover: a pod quota in the run's namespace,
		// read back and lifted.
		q := podQuota(ns.Name)
		if err := c.Create(ctx, q); err != nil {
			t.Errorf("creating a pod quota in a run's namespace: %v", err)
		} else if err := c.Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
			t.Errorf("reading the pod quota: %v", err)
		} else if err := c.Delete(ctx, q); err != nil {
			t.Errorf("deleting the pod quota: %v", err)
		}
		// The run lock and a marker, taken, renewed and released.
		for _, l := range []*coordinationv1.Lease{
			{ObjectMeta: metav1.ObjectMeta{Namespace: runlock.DefaultNamespace, Name: runlock.LockName, Labels: map[string]string{runlock.LockLabel: "true"}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: runlock.DefaultNamespace, Name: runlock.MarkerName("confined"), Labels: map[string]string{runlock.MarkerLabel: "confined"}}},
		} {
			if err := c.Create(ctx, l); err != nil {
				t.Errorf("taking Lease %s: %v", l.Name, err)
				continue
			}
			l.Spec.HolderIdentity = new("confined")
			if err := c.Update(ctx, l); err != nil {
				t.Errorf("renewing Lease %s: %v", l.Name, err)
			}
			if err := c.Delete(ctx, l); err != nil {
				t.Errorf("releasing Lease %s: %v", l.Name, err)
			}
		}
		// --disruptive: the operator's leader, force-deleted.
		leader := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "confined-operator",
			Labels: map[string]string{"app.kubernetes.io/name": "gpulab-operator"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if err := admin.Create(ctx, leader); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, leader, client.GracePeriodSeconds(0)); err != nil {
			t.Errorf("force-deleting an operator pod in %s: %v", operatorNamespace, err)
		}
		if err := c.Delete(ctx, ns); err != nil {
			t.Errorf("deleting the run's namespace: %v", err)
		}
	})

	// runlock itself, as the runner: the lock and the marker are renewed
	// with the verbs the role grants (the marker's renewal once used
	// patch, which the role does not give, and a run on kind warned that
	// its marker went unrenewed).
	t.Run("runlock renews as the runner", func(t *testing.T) {
		run, err := runlock.Start(ctx, runlock.Options{Client: c, RunID: "confined-renew", Duration: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		key := client.ObjectKey{Namespace: runlock.DefaultNamespace, Name: runlock.MarkerName("confined-renew")}
		var first coordinationv1.Lease
		if err := admin.Get(ctx, key, &first); err != nil {
			t.Fatal(err)
		}
		polltest.Eventually(t, 10*time.Second, "the marker renewed", func() bool {
			var now coordinationv1.Lease
			return admin.Get(ctx, key, &now) == nil && now.Spec.RenewTime != nil && first.Spec.RenewTime != nil &&
				now.Spec.RenewTime.After(first.Spec.RenewTime.Time)
		})
		if err := run.Release(ctx); err != nil {
			t.Errorf("releasing: %v", err)
		}
		if w := run.Warnings(); len(w) > 0 {
			t.Errorf("warnings while renewing as the runner: %v", w)
		}
	})

	// The preflight: this ServiceAccount is confined, and says by what.
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := rbac.CheckConfinement(ctx, c, dc); err != nil || !strings.Contains(line, "ValidatingAdmissionPolicy '"+rbac.Name+"'") {
		t.Errorf("CheckConfinement = %q, %v; want the runner confined by %s", line, err, rbac.Name)
	}
}

// TestCheckConfinementRefusesAnUnconfinedRunner: a ServiceAccount the
// policy does not match is reported as unconfined, and a person is told
// the policy is not about them.
func TestCheckConfinementRefusesAnUnconfinedRunner(t *testing.T) {
	if api == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	applyShipped(t, api.Client)
	// Another ServiceAccount bound to the same role: the policy names
	// the shipped one only.
	user := rbac.ServiceAccountUser("elsewhere", rbac.Name)
	if err := api.Client.Create(ctx, bindRole("gpulab-conformance-elsewhere", "elsewhere")); err != nil {
		t.Fatal(err)
	}
	cfg, err := api.AsUser(user, "system:serviceaccounts", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, cfg, "create", "", "namespaces", true)
	c, err := client.New(cfg, client.Options{Scheme: local.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.CheckConfinement(ctx, c, dc); err == nil || !strings.Contains(err.Error(), "is not confined") {
		t.Errorf("an unconfined ServiceAccount: %v, want it reported as not confined", err)
	}
	adminDC, err := discovery.NewDiscoveryClientForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := rbac.CheckConfinement(ctx, api.Client, adminDC); err != nil || !strings.Contains(line, "not a ServiceAccount") {
		t.Errorf("a person: %q, %v; want a note that the policy confines the runner only", line, err)
	}
}

// bindRole binds the shipped ClusterRole to the ServiceAccount
// gpulab-conformance of namespace ns.
func bindRole(name, ns string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: rbac.Name, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbac.Name}}
}
