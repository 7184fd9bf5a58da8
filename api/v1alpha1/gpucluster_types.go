package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod names are <cluster>-head and <cluster>-<group>-<index>, and must stay valid
// DNS labels (63 characters) because they double as hostnames. With at most
// MaxReplicas pods a group, the index takes at most three digits, so the
// cluster name and group name together may use 63-2-3 = 58 characters.
const (
	// MaxReplicas bounds a worker group's size (and the index in its pod names).
	MaxReplicas = 999
	// MaxPodNameBase is the longest len(cluster)+len(group) that keeps every pod
	// name within 63 characters.
	MaxPodNameBase = 58
	// HeadGroupName is the task name of the head pod; no worker group may use it.
	HeadGroupName = "head"
)

// GPUCluster is a head pod plus worker groups, created as bare pods and
// gang-scheduled as one PodGroup: Volcano's, or Kubernetes' own.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gpuc,categories=gpulab
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyPods`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredPods`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpus`
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.scheduling.queue`,priority=1
// +kubebuilder:printcolumn:name="PodGroup",type=string,JSONPath=`.status.podGroup.phase`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 58",message="metadata.name must be at most 58 characters so that pod names (<cluster>-<group>-<index>) fit in 63"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must start with a letter and contain only lowercase letters, digits and '-' (it names the head Service)"
// +kubebuilder:validation:XValidation:rule="self.spec.workerGroups.all(g, size(self.metadata.name) + size(g.name) <= 58)",message="cluster name plus worker group name must be at most 58 characters so that pod names (<cluster>-<group>-<index>) fit in 63"
type GPUCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUClusterSpec   `json:"spec"`
	Status GPUClusterStatus `json:"status,omitempty"`
}

// GPUClusterSpec is the desired shape of a GPUCluster.
type GPUClusterSpec struct {
	// Head is the single coordinating pod (rank 0, rendezvous, driver).
	Head HeadSpec `json:"head"`

	// WorkerGroups are the groups of identical worker pods.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:XValidation:rule="self.all(g, self.exists_one(o, o.name == g.name))",message="worker group names must be unique"
	WorkerGroups []WorkerGroupSpec `json:"workerGroups"`

	// Scheduling selects the scheduler and the Volcano queue.
	// +optional
	// +kubebuilder:default={}
	Scheduling SchedulingSpec `json:"scheduling,omitempty"`

	// Suspend deletes the cluster's pods and releases the gang's queue
	// resources; setting it back to false recreates them.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// HeadSpec describes the head pod.
//
// +kubebuilder:validation:XValidation:rule="has(self.gpus) == has(oldSelf.gpus) && (!has(self.gpus) || self.gpus == oldSelf.gpus)",message="head.gpus is immutable: a running gang's pods must all have the GPUs they were placed with; create a new cluster instead"
type HeadSpec struct {
	// GPUs is the head's accelerator request; most heads need none.
	// +optional
	GPUs *GPURequest `json:"gpus,omitempty"`

	// Template is the head pod's template.
	Template corev1.PodTemplateSpec `json:"template"`
}

// WorkerGroupSpec describes one group of identical worker pods.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.replicas",message="minReplicas must not exceed replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.maxReplicas) || self.replicas <= self.maxReplicas",message="replicas must not exceed maxReplicas"
// +kubebuilder:validation:XValidation:rule="has(self.gpus) == has(oldSelf.gpus) && (!has(self.gpus) || self.gpus == oldSelf.gpus)",message="workerGroups[].gpus is immutable: a running gang's pods must all have the GPUs they were placed with; add a new group or create a new cluster instead"
type WorkerGroupSpec struct {
	// Name names the group; pods are <cluster>-<name>-<index>. Letters and
	// digits only: with no '-' in group names, a pod name splits into cluster,
	// group and index one way only, so two clusters can never want one pod
	// name (cluster "a" with group "x-w1" and cluster "a-x" with group "w1").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9]*$`
	// +kubebuilder:validation:XValidation:rule="self != 'head'",message="worker group name 'head' is reserved for the head pod"
	// +kubebuilder:validation:XValidation:rule="!self.contains('-')",message="worker group names may not contain '-': pod names are <cluster>-<group>-<index>, and a '-' in the group would let two clusters want the same pod name"
	Name string `json:"name"`

	// Replicas is the number of worker pods.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=999
	Replicas int32 `json:"replicas"`

	// MinReplicas is how many of this group's pods the gang needs before any
	// of them may start. Defaults to replicas (all of them).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=999
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas bounds replicas for scaling tools. Unset means no bound
	// beyond the API's limit of 999.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=999
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`

	// GPUs is the accelerator request of each pod in the group.
	// +optional
	GPUs *GPURequest `json:"gpus,omitempty"`

	// Template is the worker pods' template.
	Template corev1.PodTemplateSpec `json:"template"`
}

// GPURequest is an accelerator request, resolved by the operator against the
// healthy capacity in GPUInventory.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.perPod) && has(self.wholeNode) && self.wholeNode)",message="gpus.perPod and gpus.wholeNode are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="has(self.perPod) || (has(self.wholeNode) && self.wholeNode)",message="gpus needs either perPod or wholeNode: true"
// +kubebuilder:validation:XValidation:rule="!has(self.deviceClassName) || has(self.perPod)",message="gpus.deviceClassName (DRA) needs perPod"
// +kubebuilder:validation:XValidation:rule="!has(self.selectors) || has(self.deviceClassName)",message="gpus.selectors need gpus.deviceClassName"
type GPURequest struct {
	// PerPod is the number of GPUs each pod requests.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	PerPod *int32 `json:"perPod,omitempty"`

	// WholeNode requests every healthy GPU of the node each pod lands on; the
	// count is resolved from GPUInventory of the matching nodes.
	// +optional
	WholeNode bool `json:"wholeNode,omitempty"`

	// Product restricts placement to nodes whose nvidia.com/gpu.product label
	// equals this value (GPU Feature Discovery format, e.g. NVIDIA-H100-80GB-HBM3).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Product string `json:"product,omitempty"`

	// MinMemoryMiB restricts placement to nodes whose GPUs have at least this
	// much memory (nvidia.com/gpu.memory label).
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinMemoryMiB *int64 `json:"minMemoryMiB,omitempty"`

	// DeviceClassName hands the GPUs out through Dynamic Resource
	// Allocation instead of the nvidia.com/gpu extended resource: each pod
	// gets a ResourceClaim, from a ResourceClaimTemplate the operator
	// creates and the cluster owns (<cluster>-<group>-gpus), for exactly
	// perPod devices of this DeviceClass (gpu.gpulab.io for gpulab's agent,
	// gpu.nvidia.com for NVIDIA's DRA driver).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	DeviceClassName string `json:"deviceClassName,omitempty"`

	// Selectors are CEL expressions every claimed device must satisfy, as
	// in a DeviceRequest (e.g. device.attributes["gpu.gpulab.io"].productName
	// == "NVIDIA H200"); only with deviceClassName.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:MinLength=1
	Selectors []string `json:"selectors,omitempty"`

	// Container names the container that receives the nvidia.com/gpu request
	// (or, with deviceClassName, the claim);
	// it must exist in the template (the operator fails the cluster with
	// reason InvalidSpec otherwise: a schema rule over the containers list
	// costs more than the API server allows). Defaults to the first container.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Container string `json:"container,omitempty"`
}

// SchedulerName selects who places a GPUCluster's pods.
// +kubebuilder:validation:Enum=volcano;kubernetes;default
type SchedulerName string

const (
	// SchedulerVolcano gang-schedules the cluster through a Volcano PodGroup
	// (scheduling.volcano.sh/v1beta1).
	SchedulerVolcano SchedulerName = "volcano"
	// SchedulerKubernetes gang-schedules the cluster through kube-scheduler's
	// own gang scheduling: a scheduling.k8s.io PodGroup with a gang policy,
	// joined by every pod's spec.schedulingGroup (the GenericWorkload
	// feature gate; scheduling.k8s.io/v1beta1, Kubernetes 1.37 and later).
	SchedulerKubernetes SchedulerName = "kubernetes"
	// SchedulerDefault leaves pods to the default kube-scheduler, without a gang.
	SchedulerDefault SchedulerName = "default"
)

// SchedulingSpec selects the scheduler, queue and priority of a cluster's gang.
//
// +kubebuilder:validation:XValidation:rule="!has(self.scheduler) || self.scheduler != 'kubernetes' || !has(self.queue) || self.queue == 'default'",message="scheduling.queue names a Volcano queue: kube-scheduler's gang scheduling has no queues, so scheduler kubernetes takes only the default queue"
type SchedulingSpec struct {
	// Scheduler places the pods: volcano (a Volcano PodGroup), kubernetes
	// (kube-scheduler's native gang scheduling) or default (no gang).
	// Defaults to volcano. Immutable: switching would leave the gang's
	// PodGroup behind, or pods outside any gang.
	// +optional
	// +kubebuilder:default=volcano
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="scheduling.scheduler is immutable: switching schedulers would orphan the gang's PodGroup; create a new cluster instead"
	Scheduler SchedulerName `json:"scheduler,omitempty"`

	// Queue is the Volcano queue of the PodGroup. Defaults to "default".
	// Volcano only: with scheduler kubernetes it must stay "default".
	// +optional
	// +kubebuilder:default=default
	// +kubebuilder:validation:MaxLength=253
	Queue string `json:"queue,omitempty"`

	// PriorityClassName is set on the PodGroup and every pod.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Capacity says whether the cluster's nodes can grow for this gang,
	// which decides what happens to a gang larger than today's nodes:
	// Auto (the default) waits for nodes when an autoscaler the operator
	// sees (a Karpenter NodePool) declares room for it, and is
	// Unschedulable otherwise; Autoscaled always creates the gang and
	// waits for nodes (an autoscaler the operator cannot see, such as
	// cluster-autoscaler); Fixed never does.
	// +optional
	Capacity CapacityMode `json:"capacity,omitempty"`
}

// CapacityMode is how a gang larger than today's nodes is treated.
// +kubebuilder:validation:Enum=Auto;Autoscaled;Fixed
type CapacityMode string

const (
	// CapacityAuto waits for nodes that a visible autoscaler can add.
	CapacityAuto CapacityMode = "Auto"
	// CapacityAutoscaled always waits for nodes.
	CapacityAutoscaled CapacityMode = "Autoscaled"
	// CapacityFixed counts today's nodes only.
	CapacityFixed CapacityMode = "Fixed"
)

// ClusterPhase is a one-word summary of a GPUCluster's state.
// +kubebuilder:validation:Enum=Pending;Unschedulable;WaitingForNodes;Scheduling;Provisioning;Ready;Suspended;Failed
type ClusterPhase string

const (
	// ClusterPending means accepted, children not yet created.
	ClusterPending ClusterPhase = "Pending"
	// ClusterUnschedulable means the gang can never fit the healthy inventory.
	ClusterUnschedulable ClusterPhase = "Unschedulable"
	// ClusterWaitingForNodes means the gang is larger than today's nodes,
	// and its pods exist so that the cluster's autoscaler adds nodes.
	ClusterWaitingForNodes ClusterPhase = "WaitingForNodes"
	// ClusterScheduling means pods exist, waiting for the gang to be bound.
	ClusterScheduling ClusterPhase = "Scheduling"
	// ClusterProvisioning means the gang is bound, pods are starting.
	ClusterProvisioning ClusterPhase = "Provisioning"
	// ClusterReady means every desired pod is Ready.
	ClusterReady ClusterPhase = "Ready"
	// ClusterSuspended means pods deleted and the gang released on request.
	ClusterSuspended ClusterPhase = "Suspended"
	// ClusterFailed means the cluster cannot make progress without a spec change.
	ClusterFailed ClusterPhase = "Failed"
)

// GPUClusterStatus is the observed state of a GPUCluster.
type GPUClusterStatus struct {
	// Phase summarises the cluster's state.
	// +optional
	Phase ClusterPhase `json:"phase,omitempty"`

	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// DesiredPods counts the pods the spec asks for, head included.
	// +optional
	DesiredPods int32 `json:"desiredPods,omitempty"`

	// ReadyPods counts the pods that are Ready.
	// +optional
	ReadyPods int32 `json:"readyPods,omitempty"`

	// GPUs is the total number of GPUs the desired pods request, as resolved.
	// +optional
	GPUs int32 `json:"gpus,omitempty"`

	// Groups reports each group (the head as "head") as resolved and observed.
	// +optional
	// +listType=map
	// +listMapKey=name
	Groups []GroupStatus `json:"groups,omitempty"`

	// PodGroup mirrors the gang's PodGroup (Volcano's or Kubernetes').
	// +optional
	PodGroup *PodGroupStatus `json:"podGroup,omitempty"`

	// ScheduledTime is when every desired pod was first bound to a node.
	// +optional
	ScheduledTime *metav1.Time `json:"scheduledTime,omitempty"`

	// ReadyTime is when every desired pod was first Ready.
	// +optional
	ReadyTime *metav1.Time `json:"readyTime,omitempty"`

	// Conditions: Ready, Schedulable, GangScheduled, GangPolicyComplete,
	// HeadReady, Suspended, ReconcileSucceeded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GroupStatus is the resolved and observed state of one group of pods.
type GroupStatus struct {
	// Name is the group name ("head" for the head pod).
	Name string `json:"name"`
	// Desired is the number of pods the spec asks for.
	Desired int32 `json:"desired"`
	// Ready is the number of the group's pods that are Ready.
	Ready int32 `json:"ready"`
	// GPUsPerPod is the resolved nvidia.com/gpu request of each pod.
	// +optional
	GPUsPerPod int32 `json:"gpusPerPod,omitempty"`
}

// PodGroupStatus mirrors the parts of the gang's PodGroup a user needs:
// Volcano's (scheduler volcano) or Kubernetes' own (scheduler kubernetes).
type PodGroupStatus struct {
	// Name of the PodGroup in the cluster's namespace.
	Name string `json:"name"`
	// APIVersion is the PodGroup's API (scheduling.volcano.sh/v1beta1 or
	// scheduling.k8s.io/v1beta1); empty means Volcano's.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// Phase is Volcano's phase (Pending, Inqueue, Running, Unknown,
	// Completed) or, for a scheduling.k8s.io PodGroup, Pending, Scheduled,
	// or the reason kube-scheduler gave for not scheduling it
	// (Unschedulable, SchedulerError), from its PodGroupInitiallyScheduled
	// condition. It explains a gang that is not Ready: empty while the
	// cluster is Ready, because the scheduler moves its PodGroup on (to
	// Running) on its own schedule, often after the pods are Ready.
	// +optional
	Phase string `json:"phase,omitempty"`
	// MinMember is the gang size (a scheduling.k8s.io PodGroup's
	// gang minCount).
	MinMember int32 `json:"minMember"`
	// MinTaskMember is the gang size per task (group); only Volcano's
	// PodGroup holds it.
	// +optional
	MinTaskMember map[string]int32 `json:"minTaskMember,omitempty"`
	// MinResources is the sum of the effective requests of the gang's
	// members; only Volcano's PodGroup holds it.
	// +optional
	MinResources corev1.ResourceList `json:"minResources,omitempty"`
}

// GPUClusterList is a list of GPUClusters.
//
// +kubebuilder:object:root=true
type GPUClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUCluster `json:"items"`
}

// GetConditions returns the cluster's conditions.
func (c *GPUCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the cluster's conditions.
func (c *GPUCluster) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}
