package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A job's own cluster is named <job>-<attempt>, with at most MaxBackoffLimit+1
// attempts (three digits and a dash), so a job name and a group name together
// may use MaxPodNameBase-4 characters.
const (
	// MaxBackoffLimit bounds retries of a GPUJob.
	MaxBackoffLimit = 99
	// MaxJobPodNameBase is the longest len(job)+len(group) whose cluster's pod
	// names fit in 63 characters.
	MaxJobPodNameBase = MaxPodNameBase - 4
)

// GPUJob runs a submitter to completion on a GPUCluster it creates (or an
// existing one), with retries, a deadline and a cleanup policy.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gpuj,categories=gpulab
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.clusterName`
// +kubebuilder:printcolumn:name="Duration",type=string,JSONPath=`.status.duration`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.status.attempts`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="metadata.name must be at most 50 characters so that its clusters (<job>-<attempt>) and submitter Jobs get valid names"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must start with a letter and contain only lowercase letters, digits and '-' (it names the job's GPUCluster)"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.clusterTemplate) || self.spec.clusterTemplate.workerGroups.all(g, size(self.metadata.name) + size(g.name) <= 54)",message="job name plus worker group name must be at most 54 characters so that pod names (<job>-<attempt>-<group>-<index>) fit in 63"
type GPUJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUJobSpec   `json:"spec"`
	Status GPUJobStatus `json:"status,omitempty"`
}

// GPUJobSpec is the desired run of a GPUJob.
//
// +kubebuilder:validation:XValidation:rule="has(self.clusterTemplate) != has(self.clusterRef)",message="set exactly one of clusterTemplate and clusterRef"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterRef) || !has(self.cleanupPolicy) || self.cleanupPolicy != 'DeleteCluster'",message="cleanupPolicy DeleteCluster needs clusterTemplate: a job never deletes a cluster it did not create"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterRef) || !has(self.retryPolicy) || self.retryPolicy != 'NewCluster'",message="retryPolicy NewCluster needs clusterTemplate"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterRef) || !has(self.cleanupPolicy) || self.cleanupPolicy != 'SuspendCluster'",message="cleanupPolicy SuspendCluster needs clusterTemplate: a job never suspends a cluster it did not create"
// +kubebuilder:validation:XValidation:rule="has(self.clusterTemplate) == has(oldSelf.clusterTemplate)",message="clusterTemplate and clusterRef cannot be switched after creation: which cluster a job owns is fixed"
type GPUJobSpec struct {
	// ClusterTemplate is the spec of the GPUCluster the job creates and owns.
	// Immutable, as a batch/v1 Job's pod template: every attempt is built
	// from the same spec.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterTemplate is immutable"
	ClusterTemplate *GPUClusterSpec `json:"clusterTemplate,omitempty"`

	// ClusterRef names an existing GPUCluster in the job's namespace to run on.
	// Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterRef is immutable"
	ClusterRef *corev1.LocalObjectReference `json:"clusterRef,omitempty"`

	// Submitter is the pod template of the batch/v1 Job that drives the run
	// (torchrun, mpirun, a test binary). It receives the head Service address
	// and the cluster's pod names as environment variables. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="submitter is immutable"
	Submitter corev1.PodTemplateSpec `json:"submitter"`

	// BackoffLimit is how many times a failed run is retried. Defaults to 0.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=99
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// RetryPolicy says whether a retry reuses the cluster or gets a fresh one.
	// Defaults to NewCluster with clusterTemplate and ReuseCluster with clusterRef.
	// +optional
	RetryPolicy RetryPolicy `json:"retryPolicy,omitempty"`

	// ActiveDeadlineSeconds bounds the whole job, retries included; past it the
	// job fails with reason DeadlineExceeded and everything is stopped. As with
	// batch/v1 Jobs, time suspended does not count: resuming resets startTime.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// TTLSecondsAfterFinished deletes the job this long after it finished.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// Suspend stops the run: the cluster's pods are deleted and the gang's
	// queue resources released until it is set back to false.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// CleanupPolicy says what happens to the cluster when the job finishes.
	// Defaults to DeleteCluster with clusterTemplate and KeepCluster with clusterRef.
	// +optional
	CleanupPolicy CleanupPolicy `json:"cleanupPolicy,omitempty"`
}

// RetryPolicy says what a retry runs on.
// +kubebuilder:validation:Enum=NewCluster;ReuseCluster
type RetryPolicy string

const (
	// RetryNewCluster deletes the failed attempt's cluster and creates a fresh one.
	RetryNewCluster RetryPolicy = "NewCluster"
	// RetryReuseCluster runs a new submitter on the same cluster.
	RetryReuseCluster RetryPolicy = "ReuseCluster"
)

// CleanupPolicy says what happens to a finished job's cluster.
// +kubebuilder:validation:Enum=DeleteCluster;KeepCluster;SuspendCluster
type CleanupPolicy string

const (
	// CleanupDeleteCluster deletes the job's cluster.
	CleanupDeleteCluster CleanupPolicy = "DeleteCluster"
	// CleanupKeepCluster leaves the cluster running.
	CleanupKeepCluster CleanupPolicy = "KeepCluster"
	// CleanupSuspendCluster suspends the cluster, releasing its gang.
	CleanupSuspendCluster CleanupPolicy = "SuspendCluster"
)

// JobPhase is a one-word summary of a GPUJob's state.
// +kubebuilder:validation:Enum=Pending;Provisioning;Running;Succeeded;Failed;Suspended
type JobPhase string

const (
	// JobPending means accepted, nothing created yet.
	JobPending JobPhase = "Pending"
	// JobProvisioning means waiting for the cluster to be Ready.
	JobProvisioning JobPhase = "Provisioning"
	// JobRunning means the submitter runs.
	JobRunning JobPhase = "Running"
	// JobSucceeded means the submitter completed.
	JobSucceeded JobPhase = "Succeeded"
	// JobFailed means retries exhausted or the deadline passed.
	JobFailed JobPhase = "Failed"
	// JobSuspended means stopped on request.
	JobSuspended JobPhase = "Suspended"
)

// GPUJobStatus is the observed state of a GPUJob.
type GPUJobStatus struct {
	// Phase summarises the job's state.
	// +optional
	Phase JobPhase `json:"phase,omitempty"`

	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ClusterName is the GPUCluster of the current attempt. It is recorded
	// before the cluster is created, so a restarted operator finds it again.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`

	// SubmitterName is the batch/v1 Job of the current attempt.
	// +optional
	SubmitterName string `json:"submitterName,omitempty"`

	// Attempts counts runs started, the current one included.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// Failures counts runs that failed.
	// +optional
	Failures int32 `json:"failures,omitempty"`

	// StartTime is when the job was first reconciled, or last resumed from
	// suspension; activeDeadlineSeconds counts from it.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// ClusterReadyTime is when the current attempt's cluster became Ready.
	// +optional
	ClusterReadyTime *metav1.Time `json:"clusterReadyTime,omitempty"`
	// SubmitTime is when the current attempt's submitter was created.
	// +optional
	SubmitTime *metav1.Time `json:"submitTime,omitempty"`
	// CompletionTime is when the job finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Duration is CompletionTime-StartTime once finished, for kubectl.
	// +optional
	Duration string `json:"duration,omitempty"`

	// Conditions means Ready (cluster), Complete, Failed, Suspended.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GPUJobList is a list of GPUJobs.
//
// +kubebuilder:object:root=true
type GPUJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUJob `json:"items"`
}

// GetConditions returns the job's conditions.
func (j *GPUJob) GetConditions() []metav1.Condition { return j.Status.Conditions }

// SetConditions replaces the job's conditions.
func (j *GPUJob) SetConditions(conditions []metav1.Condition) { j.Status.Conditions = conditions }
