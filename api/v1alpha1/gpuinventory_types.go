package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClearHealthAnnotation on a GPUInventory asks its node's agent to clear the
// sticky health verdicts of the listed GPUs: comma-separated UUIDs, or "all".
// The agent removes the annotation once it has published the cleared status.
const ClearHealthAnnotation = "gpulab.io/clear-health"

// The agent's heartbeat is a coordination.k8s.io Lease per node, as the
// kubelet's is (KEP-589): renewing a small built-in object costs the API
// server and every watcher of GPUInventories far less than rewriting the
// inventory, which the agent then writes only when it changes.
const (
	// DefaultHeartbeatLeaseNamespace holds the agents' heartbeat Leases
	// unless the agent and the operator are told otherwise (the chart gives
	// both its release namespace).
	DefaultHeartbeatLeaseNamespace = "gpulab-system"
	// HeartbeatLeaseLabel marks a Lease as the heartbeat of the node agent
	// of the node it names (the Lease is named after the node too). Readers
	// select by it; the agent renews no Lease without it.
	HeartbeatLeaseLabel = "gpulab.io/agent-heartbeat"
	// StaleHeartbeats is how many heartbeat periods an agent may miss before
	// its inventory is no longer trusted: its agent is gone, and a GPU that
	// fell sick since would go unreported. The agent's Lease lasts as long.
	StaleHeartbeats = 3
)

// GPUInventory is the GPU inventory of one node, named after the node and
// written only by that node's agent (server-side apply, its own field manager).
// It has no spec: everything in it is observed.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gpuinv,categories=gpulab
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.summary.count`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.summary.healthy`
// +kubebuilder:printcolumn:name="Product",type=string,JSONPath=`.status.summary.product`
// +kubebuilder:printcolumn:name="Memory(MiB)",type=integer,JSONPath=`.status.summary.memoryMiB`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.status.driverVersion`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUInventory struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is written as a whole by the node agent; there is no status
	// subresource, so one server-side apply creates or updates everything.
	// +optional
	Status GPUInventoryStatus `json:"status,omitempty"`
}

// GPUInventoryStatus is what the agent read from NVML.
type GPUInventoryStatus struct {
	// DriverVersion is the NVIDIA driver version (e.g. 550.54.15).
	// +optional
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDADriverVersion is the CUDA version the driver supports (e.g. 12.4).
	// +optional
	CUDADriverVersion string `json:"cudaDriverVersion,omitempty"`
	// NVMLVersion is the NVML library version.
	// +optional
	NVMLVersion string `json:"nvmlVersion,omitempty"`

	// Summary rolls the GPUs up for scheduling decisions.
	// +optional
	Summary InventorySummary `json:"summary,omitempty"`

	// GPUs lists every GPU by index.
	// +optional
	// +listType=map
	// +listMapKey=index
	GPUs []GPUDevice `json:"gpus,omitempty"`

	// HeartbeatTime is when the agent last wrote this status. Older agents
	// rewrite it every HeartbeatSeconds, changed or not; newer ones write it
	// on change (and every resync) and renew their node's heartbeat Lease
	// (HeartbeatLeaseLabel) in between. Consumers stop trusting an inventory
	// when neither was renewed for a few HeartbeatSeconds: its agent is gone
	// and sick GPUs go unreported.
	// +optional
	HeartbeatTime *metav1.Time `json:"heartbeatTime,omitempty"`
	// HeartbeatSeconds is how often the agent promises a heartbeat (of this
	// status or of its Lease); zero means it promises none, and the
	// inventory never goes stale.
	// +optional
	// +kubebuilder:validation:Minimum=0
	HeartbeatSeconds int32 `json:"heartbeatSeconds,omitempty"`

	// Conditions means Ready (the agent scanned successfully and recently).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InventorySummary is a node's GPUs rolled up. The operator sizes gangs from
// it, so the API server rejects summaries that cannot be true.
//
// +kubebuilder:validation:XValidation:rule="self.healthy <= self.count",message="summary.healthy must not exceed summary.count"
type InventorySummary struct {
	// Count is the number of GPUs.
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count"`
	// Healthy is the number of GPUs whose health is Healthy.
	// +kubebuilder:validation:Minimum=0
	Healthy int32 `json:"healthy"`
	// Product is the GFD-style product name shared by the GPUs ("mixed" otherwise).
	// +optional
	Product string `json:"product,omitempty"`
	// MemoryMiB is the smallest memory total among the GPUs.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
}

// GPUDevice is one physical GPU.
type GPUDevice struct {
	// Index is NVML's device index.
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// UUID is the GPU's UUID (GPU-...). For a GPU that NVML reports lost it
	// is the UUID last read at that index.
	// +optional
	UUID string `json:"uuid,omitempty"`
	// Product is the device name as NVML reports it.
	// +optional
	Product string `json:"product,omitempty"`
	// MemoryMiB is the total framebuffer memory.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// ComputeCapability is major.minor (e.g. 9.0).
	// +optional
	ComputeCapability string `json:"computeCapability,omitempty"`
	// Architecture is the GPU architecture (e.g. hopper).
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// PCIBusID is the PCI bus id (e.g. 00000000:07:00.0).
	// +optional
	PCIBusID string `json:"pciBusID,omitempty"`
	// MIG is the GPU's MIG mode and devices.
	// +optional
	MIG *MIGStatus `json:"mig,omitempty"`
	// Fabric is the NVLink fabric state on NVSwitch systems.
	// +optional
	Fabric *FabricStatus `json:"fabric,omitempty"`
	// Health says whether the GPU can take work, and why not.
	Health GPUHealth `json:"health"`
	// Errors records queries that failed for this GPU (field: error).
	// +optional
	Errors []string `json:"errors,omitempty"`
}

// MIGStatus is a GPU's MIG mode and instances.
type MIGStatus struct {
	// Capable says whether the GPU supports MIG.
	Capable bool `json:"capable"`
	// Current is the MIG mode in effect: Enabled or Disabled.
	// +optional
	Current string `json:"current,omitempty"`
	// Pending is the MIG mode after the next GPU reset.
	// +optional
	Pending string `json:"pending,omitempty"`
	// Devices are the MIG devices carved out of the GPU.
	// +optional
	Devices []MIGDevice `json:"devices,omitempty"`
}

// MIGDevice is one MIG instance.
type MIGDevice struct {
	// Index is the MIG device index within its parent.
	Index int32 `json:"index"`
	// UUID is the MIG device UUID (MIG-...).
	// +optional
	UUID string `json:"uuid,omitempty"`
	// Profile is the profile name (e.g. 1g.10gb).
	// +optional
	Profile string `json:"profile,omitempty"`
	// MemoryMiB is the instance's memory.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
}

// FabricStatus is the NVLink fabric registration state of a GPU.
type FabricStatus struct {
	// State is NotSupported, NotStarted, InProgress or Completed.
	State string `json:"state"`
	// Status is NVML's result of the registration (Success or an error).
	// +optional
	Status string `json:"status,omitempty"`
}

// HealthState is Healthy, Unhealthy or Unknown.
// +kubebuilder:validation:Enum=Healthy;Unhealthy;Unknown
type HealthState string

const (
	// GPUHealthy means the GPU can take work.
	GPUHealthy HealthState = "Healthy"
	// GPUUnhealthy means a critical XID, a lost GPU, a row-remap failure or an
	// incomplete fabric; the reason says which.
	GPUUnhealthy HealthState = "Unhealthy"
	// GPUUnknown means the agent could not tell.
	GPUUnknown HealthState = "Unknown"
)

// GPUHealth is the health of one GPU.
type GPUHealth struct {
	// State is Healthy, Unhealthy or Unknown.
	State HealthState `json:"state"`
	// Reason is a CamelCase reason (e.g. XidCriticalError, GPUIsLost).
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message explains the reason.
	// +optional
	Message string `json:"message,omitempty"`
	// LastXID is the last critical XID seen.
	// +optional
	LastXID *int32 `json:"lastXID,omitempty"`
	// Since is when the state last changed.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Sticky means the verdict came from an event (a critical XID, an
	// uncorrectable ECC error) rather than from a state NVML reports on every
	// scan. It outlives agent restarts and is cleared only by the
	// gpulab.io/clear-health annotation.
	// +optional
	Sticky bool `json:"sticky,omitempty"`
}

// GPUInventoryList is a list of GPUInventories.
//
// +kubebuilder:object:root=true
type GPUInventoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUInventory `json:"items"`
}

// GetConditions returns the inventory's conditions.
func (i *GPUInventory) GetConditions() []metav1.Condition { return i.Status.Conditions }

// SetConditions replaces the inventory's conditions.
func (i *GPUInventory) SetConditions(conditions []metav1.Condition) {
	i.Status.Conditions = conditions
}
