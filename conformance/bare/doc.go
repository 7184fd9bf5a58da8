// Package bare is the suite's no-operator gang (--workload=bare): the floor
// every operator is measured against. The suite itself creates, for each
// gang, what gpulab's operator creates for the same GPUCluster, built by
// the operator's own gang builder (internal/gang: the pods, the Volcano
// PodGroup sized by internal/gang/sizing, the head Service, the DRA claim
// templates), through a client limited as the operators are. A gang's
// Spec is a GPUCluster's spec (Spec.Cluster), so the builder gets the
// floor the same input the operator gets; parity_test.go checks the
// children against gangtest.Want, as the operator's tests check its
// desired state.
//
// A gang's own object is a ConfigMap named after it (Object). It carries
// the gang's spec and desired pod count and the GangLabel; its children
// (Children: the Volcano PodGroup, the headless head Service, the claim
// templates and the pods) are controlled by it, so deleting it deletes
// them and the recorder maps them to the gang by owner kind ConfigMap.
// Create makes them in the operator's order, which keeps a gang whole: the
// PodGroup before any pod.
//
// Floor is the ideal operator that makes them: it reacts to each gang the
// moment its ConfigMap exists (Created, on a goroutine per gang outside
// the burst's create slots), serves every gang at once through a client
// with no limit (Client with Unlimited), and writes each gang's ConfigMap
// once when one watch of the namespace's pods has seen them all Ready
// (StatusKey, ReadyTimeKey): the floor's status Ready, as an operator's.
package bare
