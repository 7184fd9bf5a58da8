// Package incluster runs the suite inside the cluster, the way Sonobuoy and
// hydrophone do: Submit creates the shipped RBAC (conformance/rbac), where
// it is not there yet, the run's own objects (its results ConfigMaps and a
// Role on exactly those, the files it reads) and a Job whose pod runs
// `gpulab-conformance run --profile=cluster` as the gpulab-conformance
// ServiceAccount; the run stores its output in those ConfigMaps (Store),
// which Retrieve unpacks; Status reads the Job and the ConfigMaps; Cleanup
// removes what Submit created.
//
// The runner's objects carry RunnerLabel, never the run's own label
// (cleanup.RunIDLabel): the run deletes everything with that one at its
// end, and must not delete the pod it runs in. Objects Submit finds
// already there (a reviewed install of conformance/config) are used as
// they are and never updated or deleted: only those carrying ManagedBy
// are Submit's.
package incluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/rbac"
)

const (
	// RunnerLabel marks a run's runner objects (its Job, pod, results
	// ConfigMaps, Role and files) with the run id.
	RunnerLabel = "conformance.gpulab.io/runner-run-id"
	// ManagedByLabel marks, with ManagedBy, the shared objects Submit
	// created (namespace, ServiceAccount, roles), which Cleanup may delete.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedBy is ManagedByLabel's value on Submit's objects.
	ManagedBy = "gpulab-conformance-submit"
	// DefaultNamespace is the runner's namespace, conformance/config's.
	DefaultNamespace = rbac.Name
	// ResultsKey is the results archive (or its part) in each ConfigMap.
	ResultsKey = "results.tar.gz"
	// VerdictAnnotation is the run's verdict on its first ConfigMap.
	VerdictAnnotation = "conformance.gpulab.io/verdict"
	// MaxParts is how many ConfigMaps a run's results may span: 8 of
	// maxStored hold 7.2 MiB packed, several times a large run's output
	// with its logs, and bound what one run leaves in etcd.
	MaxParts = 8
	// resultsDir is where the pod writes its output (an emptyDir).
	resultsDir = "/results"
	// filesDir is where the files the run reads from the submitter's disk
	// are mounted.
	filesDir = "/etc/gpulab-conformance"
	// runnerUID is the image's non-root user.
	runnerUID = 65532
)

// Where the pod finds what Submit carried, and writes what the submitter
// asked for on its own disk; submit rewrites the run's flags to these.
const (
	PrometheusTokenPath = filesDir + "/prometheus/token"
	PrometheusCAPath    = filesDir + "/prometheus/ca.crt"
	BaselineDir         = filesDir + "/baseline"
	PerfDataDir         = resultsDir + "/perfdata"
)

// Start-up and stop allowances of the runner pod.
const (
	// StartUpAllowance is how long the runner pod may take to start:
	// pulling the image and, on an autoscaled cluster, a node to come.
	StartUpAllowance = 10 * time.Minute
	// StoreTimeout bounds storing the results at the run's end.
	StoreTimeout = time.Minute
	// inFlightTeardown is what the assessment running at a SIGTERM takes
	// to tear down once its context ends (cli.BackstopGrace's reckoning:
	// a few minutes at most).
	inFlightTeardown = 3 * time.Minute
)

// TerminationGrace is how long the runner pod may take to stop after a
// SIGTERM (a node drain, a deleted Job): the suite cancels its waits, the
// assessment in flight tears down, cleanup.Run waits for the run's pods
// (cleanup.PodTimeout of the pods it may have), and the results are
// written and stored; a minute to spare. Kubernetes' default 30 s would
// kill it mid-cleanup and leave the run's gangs holding GPUs.
func TerminationGrace(pods int) time.Duration {
	return inFlightTeardown + cleanup.PodTimeout(pods) + StoreTimeout + time.Minute
}

// Options says what to submit.
type Options struct {
	// Namespace is the runner's. Defaults to DefaultNamespace. Submit
	// refuses a system one or gpulab's operator's (CheckNamespace)
	// unless AllowSystemNamespace.
	Namespace string
	// AllowSystemNamespace lets Namespace be one CheckNamespace refuses.
	AllowSystemNamespace bool
	// Image is the gpulab-conformance image. Required.
	Image string
	// PullPolicy defaults to IfNotPresent.
	PullPolicy corev1.PullPolicy
	// RunID names the run (and its Job and ConfigMaps). Required.
	RunID string
	// Args are the run's flags, passed on as they are after the runner's
	// own (--profile=cluster, --run-id, --out, --results-configmap).
	Args []string
	// Files are the submitter's files the run reads, carried into the
	// pod. Default none.
	Files Files
	// TerminationGrace is the pod's. Defaults to TerminationGrace(0).
	TerminationGrace time.Duration
}

// Files are the contents of files the run reads, from the submitter's
// disk: the pod mounts them (the Prometheus ones from a Secret at
// PrometheusTokenPath and PrometheusCAPath, the baseline from a ConfigMap
// under BaselineDir).
type Files struct {
	PrometheusToken, PrometheusCA []byte
	// Baseline maps a path under BaselineDir to a baseline run's
	// results.json.
	Baseline map[string][]byte
}

func (f Files) secret() bool { return f.PrometheusToken != nil || f.PrometheusCA != nil }

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.PullPolicy == "" {
		o.PullPolicy = corev1.PullIfNotPresent
	}
	if o.TerminationGrace == 0 {
		o.TerminationGrace = TerminationGrace(0)
	}
	return o
}

// JobName is the runner Job of a run.
func JobName(runID string) string { return "gpulab-conformance-" + runID }

// ConfigMapName is where a run stores its output: the first of its parts
// (PartNames), which holds the index of the others.
func ConfigMapName(runID string) string { return "gpulab-conformance-results-" + runID }

// PartNames are the MaxParts ConfigMaps a run stored as name may fill:
// name, name-1, ... name-7.
func PartNames(name string) []string {
	names := []string{name}
	for i := 1; i < MaxParts; i++ {
		names = append(names, fmt.Sprintf("%s-%d", name, i))
	}
	return names
}

// filesName is the run's Secret of Prometheus credentials.
func filesName(runID string) string { return "gpulab-conformance-files-" + runID }

// baselineName is the run's ConfigMap of baseline runs.
func baselineName(runID string) string { return "gpulab-conformance-baseline-" + runID }

// resultsRoleName names the run's Role and RoleBinding on its ConfigMaps.
func resultsRoleName(runID string) string { return ConfigMapName(runID) }

// Shared are the objects every run uses: the runner namespace, the
// admission policy confining its ServiceAccount, and the shipped
// ServiceAccount and ClusterRole bound to it. What a run writes
// its results into is its own (RunObjects).
func Shared(ns string) []client.Object {
	nsObj := &corev1.Namespace{ObjectMeta: managed(ns, "")}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	role := rbac.ClusterRole()
	role.Labels[ManagedByLabel] = ManagedBy
	// The admission policy comes before the role: the runner is confined
	// before it may do anything, and (Cleanup deletes in reverse) loses
	// its rights before it loses its confinement.
	confinement := rbac.Confinement{User: rbac.ServiceAccountUser(ns, rbac.Name)}
	policy, binding := rbac.AdmissionPolicy(confinement), rbac.AdmissionPolicyBinding(confinement)
	for _, o := range []client.Object{policy, binding} {
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[ManagedByLabel] = ManagedBy
		o.SetLabels(labels)
	}
	return []client.Object{
		nsObj,
		policy,
		binding,
		&corev1.ServiceAccount{ObjectMeta: managed(rbac.Name, ns)},
		role,
		&rbacv1.ClusterRoleBinding{ObjectMeta: managed(rbac.Name, ""), Subjects: []rbacv1.Subject{runnerSubject(ns)},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbac.Name}},
	}
}

func managed(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
		"app.kubernetes.io/name": rbac.Name, ManagedByLabel: ManagedBy}}
}

func runnerSubject(ns string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: rbac.Name, Namespace: ns}
}

// RunObjects are every object Submit may create for one run, as keys
// (name and namespace) for Cleanup to delete: the Job, its results
// ConfigMaps, the Role and RoleBinding on them, and the files carried.
func RunObjects(namespace, runID string) []client.Object {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: namespace, Name: name} }
	objs := []client.Object{&batchv1.Job{ObjectMeta: meta(JobName(runID))}}
	for _, name := range PartNames(ConfigMapName(runID)) {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: meta(name)})
	}
	return append(objs,
		&rbacv1.RoleBinding{ObjectMeta: meta(resultsRoleName(runID))},
		&rbacv1.Role{ObjectMeta: meta(resultsRoleName(runID))},
		&corev1.Secret{ObjectMeta: meta(filesName(runID))},
		&corev1.ConfigMap{ObjectMeta: meta(baselineName(runID))},
	)
}

// runObjects are what Submit creates for the run before its Job: empty
// results ConfigMaps, a Role that lets the runner get and update exactly
// those (RBAC cannot limit create to names, so the runner may create no
// ConfigMap at all), its binding, and the files the run reads.
func runObjects(o Options) []client.Object {
	labels := func() map[string]string {
		return map[string]string{"app.kubernetes.io/name": rbac.Name, RunnerLabel: o.RunID}
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: o.Namespace, Name: name, Labels: labels()}
	}
	parts := PartNames(ConfigMapName(o.RunID))
	var objs []client.Object
	for _, name := range parts {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: meta(name)})
	}
	role := resultsRoleName(o.RunID)
	objs = append(objs,
		&rbacv1.Role{ObjectMeta: meta(role), Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: parts, Verbs: []string{"get", "update"}}}},
		&rbacv1.RoleBinding{ObjectMeta: meta(role), Subjects: []rbacv1.Subject{runnerSubject(o.Namespace)},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}},
	)
	if o.Files.secret() {
		s := &corev1.Secret{ObjectMeta: meta(filesName(o.RunID)), Data: map[string][]byte{}}
		if o.Files.PrometheusToken != nil {
			s.Data["token"] = o.Files.PrometheusToken
		}
		if o.Files.PrometheusCA != nil {
			s.Data["ca.crt"] = o.Files.PrometheusCA
		}
		objs = append(objs, s)
	}
	if len(o.Files.Baseline) > 0 {
		cm := &corev1.ConfigMap{ObjectMeta: meta(baselineName(o.RunID)), Data: map[string]string{}}
		for _, item := range baselineItems(o.Files) {
			cm.Data[item.Key] = string(o.Files.Baseline[item.Path])
		}
		objs = append(objs, cm)
	}
	return objs
}

// baselineItems map the baseline ConfigMap's keys (run-N: a key may not
// hold a slash) to their paths under BaselineDir, in a fixed order.
func baselineItems(f Files) []corev1.KeyToPath {
	paths := slices.Sorted(maps.Keys(f.Baseline))
	items := make([]corev1.KeyToPath, len(paths))
	for i, p := range paths {
		items[i] = corev1.KeyToPath{Key: fmt.Sprintf("run-%03d", i), Path: p}
	}
	return items
}

// Job is the runner: one pod, never retried (a second attempt would run
// the scenarios twice), as the ServiceAccount, restricted Pod Security,
// with modest requests (the suite is one Go process of API calls and
// watches) and time to clean up after a SIGTERM.
func Job(o Options) *batchv1.Job {
	o = o.withDefaults()
	labels := map[string]string{"app.kubernetes.io/name": rbac.Name, "app.kubernetes.io/component": "runner", RunnerLabel: o.RunID}
	args := append([]string{"run", "--profile=cluster", "--run-id=" + o.RunID, "--out=" + resultsDir,
		"--results-configmap=" + o.Namespace + "/" + ConfigMapName(o.RunID)}, o.Args...)
	uid := int64(runnerUID)
	grace := int64(o.TerminationGrace / time.Second)
	no, yes := false, true
	mounts := []corev1.VolumeMount{{Name: "results", MountPath: resultsDir}, {Name: "tmp", MountPath: "/tmp"}}
	volumes := []corev1.Volume{
		{Name: "results", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	// Read-only for everyone: the pod runs as its one non-root user, with
	// no fsGroup to give root-owned files to.
	mode := int32(0o444)
	if o.Files.secret() {
		var items []corev1.KeyToPath
		if o.Files.PrometheusToken != nil {
			items = append(items, corev1.KeyToPath{Key: "token", Path: "token"})
		}
		if o.Files.PrometheusCA != nil {
			items = append(items, corev1.KeyToPath{Key: "ca.crt", Path: "ca.crt"})
		}
		mounts = append(mounts, corev1.VolumeMount{Name: "prometheus", MountPath: filesDir + "/prometheus", ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "prometheus", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: filesName(o.RunID), Items: items, DefaultMode: &mode}}})
	}
	if len(o.Files.Baseline) > 0 {
		mounts = append(mounts, corev1.VolumeMount{Name: "baseline", MountPath: BaselineDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "baseline", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: baselineName(o.RunID)}, Items: baselineItems(o.Files), DefaultMode: &mode}}})
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(o.RunID), Namespace: o.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            rbac.Name,
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: &grace,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "conformance", Image: o.Image, ImagePullPolicy: o.PullPolicy, Args: args,
						Env:       []corev1.EnvVar{{Name: "TMPDIR", Value: "/tmp"}},
						Resources: Resources(),
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: mounts,
					}},
					Volumes: volumes,
				},
			},
		},
	}
}

// Resources are the runner container's: requests so that it is scheduled
// where it fits and is not the first evicted (a quarter of a core and
// 256 MiB cover the suite's API client and watches at --scale 100), and a
// memory limit well above them, so a leak is killed rather than the node
// starved. No CPU limit: throttling would skew the latencies it measures.
func Resources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
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
