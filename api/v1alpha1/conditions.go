package v1alpha1

// Condition types shared by gpulab kinds.
const (
	// ConditionReady: GPUCluster — every desired pod is Ready; GPUJob — its
	// cluster is Ready; GPUInventory — the agent's last scan succeeded.
	ConditionReady = "Ready"
	// ConditionSchedulable: the gang fits the healthy GPU inventory.
	ConditionSchedulable = "Schedulable"
	// ConditionSuspended: stopped on request, gang released.
	ConditionSuspended = "Suspended"
	// ConditionComplete: a GPUJob's submitter succeeded.
	ConditionComplete = "Complete"
	// ConditionFailed: a GPUJob failed for good.
	ConditionFailed = "Failed"
	// ConditionReconcileSucceeded: GPUCluster and GPUJob — the last reconcile
	// read and acted on everything it needed. False carries the error, so a
	// failing read (capacity, pods) never leaves stale conditions silent.
	ConditionReconcileSucceeded = "ReconcileSucceeded"
)

// Condition reasons.
const (
	// ReasonInsufficientGPUs: no set of healthy nodes can hold the gang.
	ReasonInsufficientGPUs = "InsufficientGPUs"
	// ReasonNoMatchingNodes: no node carries the requested product or memory.
	ReasonNoMatchingNodes = "NoMatchingNodes"
	// ReasonWaitingForNodes: the gang is larger than today's nodes, and
	// the cluster's autoscaler can add what it lacks.
	ReasonWaitingForNodes = "WaitingForNodes"
	// ReasonNoNodePoolFits: the gang is larger than today's nodes, and no
	// autoscaler NodePool can ever add what it lacks (their limits).
	ReasonNoNodePoolFits = "NoNodePoolFits"
	// ReasonFits: the gang fits the healthy inventory.
	ReasonFits = "Fits"
	// ReasonPodsReady: every desired pod is Ready.
	ReasonPodsReady = "PodsReady"
	// ReasonPodsNotReady: some desired pods are not Ready yet.
	ReasonPodsNotReady = "PodsNotReady"
	// ReasonSuspendRequested: spec.suspend is true.
	ReasonSuspendRequested = "SuspendRequested"
	// ReasonDeadlineExceeded: activeDeadlineSeconds passed.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonBackoffLimitExceeded: every retry failed.
	ReasonBackoffLimitExceeded = "BackoffLimitExceeded"
	// ReasonScanSucceeded: the agent's last NVML scan succeeded.
	ReasonScanSucceeded = "ScanSucceeded"
	// ReasonScanFailed: the agent's last NVML scan failed.
	ReasonScanFailed = "ScanFailed"
	// ReasonReconciled: the last reconcile completed without error.
	ReasonReconciled = "Reconciled"
	// ReasonReconcileError: the last reconcile failed; the message says why.
	ReasonReconcileError = "ReconcileError"
	// ReasonInvalidSpec: the spec passed the schema but cannot be built
	// (e.g. gpus.container names no container of the template).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonNameConflict: a name the object needs for a child (pod, Service,
	// PodGroup, GPUCluster, submitter Job) is held by an object it does not
	// control; the child is left untouched and the message names its owner.
	ReasonNameConflict = "NameConflict"
	// ReasonReplacing: a child's name is still held by a deleted object of
	// the same kind and name (this object's previous incarnation) until the
	// garbage collector removes it; the object waits, Pending.
	ReasonReplacing = "Replacing"
)

// GPUCluster conditions and reasons beyond the shared ones.
const (
	// ConditionGangScheduled: every desired pod is bound to a node.
	ConditionGangScheduled = "GangScheduled"
	// ConditionHeadReady: the head pod is Ready.
	ConditionHeadReady = "HeadReady"
	// ConditionGangPolicyComplete: the gang object the scheduler reads
	// carries the whole gang policy gpulab computes (minMember,
	// minTaskMember, minResources, queue, priority). False lists, in its
	// message, what the scheduler cannot be told: nothing is dropped
	// silently.
	ConditionGangPolicyComplete = "GangPolicyComplete"

	// ReasonAllPodsBound: every desired pod is bound.
	ReasonAllPodsBound = "AllPodsBound"
	// ReasonPodsPending: some desired pods are not bound yet.
	ReasonPodsPending = "PodsPending"
	// ReasonVolcanoNotInstalled: scheduler volcano was asked for and
	// Volcano's PodGroup API is not served.
	ReasonVolcanoNotInstalled = "VolcanoNotInstalled"
	// ReasonWorkloadAPINotServed: scheduler kubernetes was asked for and
	// the API server does not serve scheduling.k8s.io PodGroups (the
	// GenericWorkload feature gate and its API version are off).
	ReasonWorkloadAPINotServed = "WorkloadAPINotServed"
	// ReasonGangPolicyExpressed: the scheduler's gang object carries the
	// whole gang policy.
	ReasonGangPolicyExpressed = "GangPolicyExpressed"
	// ReasonGangPolicyPartial: the scheduler's gang object cannot carry
	// part of the gang policy (e.g. kube-scheduler's PodGroup has no
	// per-task minimums, minResources or queue); the message says which.
	ReasonGangPolicyPartial = "GangPolicyPartial"
	// ReasonNoGang: scheduler default places each pod on its own; no gang
	// policy is enforced.
	ReasonNoGang = "NoGang"
	// ReasonHeadPodReady: the head pod is Ready.
	ReasonHeadPodReady = "HeadPodReady"
	// ReasonHeadPodNotReady: the head pod is missing or not Ready.
	ReasonHeadPodNotReady = "HeadPodNotReady"
	// ReasonNotSuspended: spec.suspend is false.
	ReasonNotSuspended = "NotSuspended"
)

// GPUJob reasons beyond the shared ones.
const (
	// ReasonClusterNotFound: the job's referenced GPUCluster does not exist.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonClusterNotReady: the job's GPUCluster is not Ready yet.
	ReasonClusterNotReady = "ClusterNotReady"
	// ReasonClusterReady: the job's GPUCluster is Ready.
	ReasonClusterReady = "ClusterReady"
	// ReasonSubmitterSucceeded: the submitter Job completed.
	ReasonSubmitterSucceeded = "SubmitterSucceeded"
	// ReasonSubmitterFailed: the submitter Job failed (an attempt failed).
	ReasonSubmitterFailed = "SubmitterFailed"
	// ReasonSubmitterDeleted: the submitter Job disappeared before its
	// verdict; the attempt counts as failed instead of running again.
	ReasonSubmitterDeleted = "SubmitterDeleted"
	// ReasonClusterLost: the attempt's GPUCluster was deleted, or replaced by
	// one the job does not control, while its submitter ran.
	ReasonClusterLost = "ClusterLost"
)
