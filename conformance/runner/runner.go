// Package runner runs the suite inside the cluster, the way Sonobuoy and
// hydrophone do: Submit creates the shipped RBAC (conformance/rbac), where
// it is not there yet, and a Job whose pod runs `gpulab-conformance run
// --profile=cluster` as the gpulab-conformance ServiceAccount; the run
// stores its output in a ConfigMap (Store), which Retrieve unpacks; Status
// reads the Job and that ConfigMap; Cleanup removes what Submit created.
//
// The runner's objects carry RunnerLabel, never the run's own label
// (cleanup.RunIDLabel): the run deletes everything with that one at its
// end, and must not delete the pod it runs in. Objects Submit finds
// already there (a reviewed install of conformance/config) are used as
// they are and never updated or deleted: only those carrying ManagedBy
// are Submit's.
package runner

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
)

const (
	// RunnerLabel marks a run's runner objects (its Job, pod and results
	// ConfigMap) with the run id.
	RunnerLabel = "conformance.gpulab.io/runner-run-id"
	// ManagedByLabel marks, with ManagedBy, the shared objects Submit
	// created (namespace, ServiceAccount, roles), which Cleanup may delete.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedBy is ManagedByLabel's value on Submit's objects.
	ManagedBy = "gpulab-conformance-submit"
	// DefaultNamespace is the runner's namespace, conformance/config's.
	DefaultNamespace = rbac.Name
	// ResultsKey is the results archive in the ConfigMap.
	ResultsKey = "results.tar.gz"
	// VerdictAnnotation is the run's verdict on its ConfigMap.
	VerdictAnnotation = "conformance.gpulab.io/verdict"
	// resultsDir is where the pod writes its output (an emptyDir).
	resultsDir = "/results"
	// runnerUID is the image's non-root user.
	runnerUID = 65532
)

// Options says what to submit.
type Options struct {
	// Namespace is the runner's. Defaults to DefaultNamespace.
	Namespace string
	// Image is the gpulab-conformance image. Required.
	Image string
	// PullPolicy defaults to IfNotPresent.
	PullPolicy corev1.PullPolicy
	// RunID names the run (and its Job and ConfigMap). Required.
	RunID string
	// Args are the run's flags, passed on as they are after the runner's
	// own (--profile=cluster, --run-id, --out, --results-configmap).
	Args []string
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.PullPolicy == "" {
		o.PullPolicy = corev1.PullIfNotPresent
	}
	return o
}

// JobName is the runner Job of a run.
func JobName(runID string) string { return "gpulab-conformance-" + runID }

// ConfigMapName is where a run stores its output.
func ConfigMapName(runID string) string { return "gpulab-conformance-results-" + runID }

// Shared are the objects every run uses: the runner namespace, the shipped
// ServiceAccount and ClusterRole bound to it, and a Role that lets it write
// its results ConfigMap there (and nowhere else).
func Shared(ns string) []client.Object {
	managed := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			"app.kubernetes.io/name": rbac.Name, ManagedByLabel: ManagedBy}}
	}
	nsObj := &corev1.Namespace{ObjectMeta: managed(ns, "")}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	role := rbac.ClusterRole()
	role.Labels[ManagedByLabel] = ManagedBy
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: rbac.Name, Namespace: ns}
	return []client.Object{
		nsObj,
		&corev1.ServiceAccount{ObjectMeta: managed(rbac.Name, ns)},
		role,
		&rbacv1.ClusterRoleBinding{ObjectMeta: managed(rbac.Name, ""), Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbac.Name}},
		&rbacv1.Role{ObjectMeta: managed(rbac.Name+"-results", ns), Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "update"}}}},
		&rbacv1.RoleBinding{ObjectMeta: managed(rbac.Name+"-results", ns), Subjects: []rbacv1.Subject{sa},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: rbac.Name + "-results"}},
	}
}

// Job is the runner: one pod, never retried (a second attempt would run
// the scenarios twice), as the ServiceAccount, restricted Pod Security.
func Job(o Options) *batchv1.Job {
	o = o.withDefaults()
	labels := map[string]string{"app.kubernetes.io/name": rbac.Name, "app.kubernetes.io/component": "runner", RunnerLabel: o.RunID}
	args := append([]string{"run", "--profile=cluster", "--run-id=" + o.RunID, "--out=" + resultsDir,
		"--results-configmap=" + o.Namespace + "/" + ConfigMapName(o.RunID)}, o.Args...)
	uid := int64(runnerUID)
	no, yes := false, true
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(o.RunID), Namespace: o.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: rbac.Name,
					RestartPolicy:      corev1.RestartPolicyNever,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "conformance", Image: o.Image, ImagePullPolicy: o.PullPolicy, Args: args,
						Env: []corev1.EnvVar{{Name: "TMPDIR", Value: "/tmp"}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "results", MountPath: resultsDir}, {Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{
						{Name: "results", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
				},
			},
		},
	}
}

// ParseConfigMapRef splits --results-configmap's NAMESPACE/NAME.
func ParseConfigMapRef(ref string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: want NAMESPACE/NAME", ref)
	}
	return namespace, name, nil
}
