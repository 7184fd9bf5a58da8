// Package bare is the suite's no-operator gang (--workload=bare): the floor
// every operator is measured against. The suite itself creates, for each
// gang, what gpulab's operator creates for the same GPUCluster, named,
// labelled, annotated and sized as the operator does (the PodGroup
// arithmetic of operator/internal/sizing, the pods of
// operator/internal/controller/gpucluster's buildPod, Volcano's
// decoration), through a client limited as the operators are.
//
// A gang's own object is a ConfigMap named after it (Object). It carries
// the gang's spec and desired pod count and the GangLabel; its children
// (Children: the Volcano PodGroup, the headless head Service and the pods)
// are controlled by it, so deleting it deletes them and the recorder maps
// them to the gang by owner kind ConfigMap. Create makes them in the
// order that keeps a gang whole: the PodGroup before any pod.
package bare
